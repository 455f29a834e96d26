import { connect, createServer, type AddressInfo, type Server, type Socket } from 'node:net';

/**
 * A TCP proxy on 127.0.0.1 to a real service, to stage an outage: `stop()` closes the listener and cuts every
 * open connection, so clients see their sockets close and new connections refused (as when the service's
 * host goes down); `start()` listens again on the same port, and clients reconnect by themselves.
 *
 * @example
 * const proxy = await TcpProxy.open({ host: '127.0.0.1', port: 6379 });
 * const redis = new Redis(proxy.port, '127.0.0.1');
 * await proxy.stop(); // outage
 * await proxy.start(); // recovery
 * await proxy.close();
 */
export class TcpProxy {
  readonly #target: { host: string; port: number };
  readonly #sockets = new Set<Socket>();
  #server: Server | undefined;
  #stalled = false;
  #port = 0;

  private constructor(target: { host: string; port: number }) {
    this.#target = target;
  }

  /** Starts a proxy to `target` on a free port. */
  static async open(target: { host: string; port: number }): Promise<TcpProxy> {
    const proxy = new TcpProxy(target);
    await proxy.start();
    return proxy;
  }

  /** The port clients connect to; it stays the same across `stop()` and `start()`. */
  get port(): number {
    return this.#port;
  }

  /** Whether it accepts connections. */
  get running(): boolean {
    return this.#server !== undefined;
  }

  /** Listens (again), on the same port as before. */
  async start(): Promise<void> {
    if (this.#server) return;
    const server = createServer((client) => this.#pipe(client));
    // The port is free again once closed, but another process may grab it meanwhile: try a little longer.
    for (let tries = 0; ; tries += 1) {
      try {
        await new Promise<void>((resolve, reject) => {
          server.once('error', reject);
          server.listen(this.#port, '127.0.0.1', () => {
            server.off('error', reject);
            resolve();
          });
        });
        break;
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== 'EADDRINUSE' || tries >= 50) throw error;
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    }
    this.#port = (server.address() as AddressInfo).port;
    this.#server = server;
  }

  /** Stops listening and destroys every open connection: new connections are refused. */
  async stop(): Promise<void> {
    const server = this.#server;
    if (!server) return;
    this.#server = undefined;
    const closed = new Promise<void>((resolve) => server.close(() => resolve()));
    for (const socket of this.#sockets) socket.destroy();
    this.#sockets.clear();
    await closed;
  }

  /**
   * A network that drops every packet: connections stay open and new ones are accepted, but nothing gets
   * through either way, until {@link TcpProxy.heal}. What was sent meanwhile is lost, so a connection in
   * use during the stall stays stuck after it: only a client-side timeout frees it.
   */
  stall(): void {
    this.#stalled = true;
  }

  /** Lets packets through again. */
  heal(): void {
    this.#stalled = false;
  }

  /** Stops for good. */
  async close(): Promise<void> {
    await this.stop();
  }

  #pipe(client: Socket): void {
    const upstream = connect(this.#target.port, this.#target.host);
    this.#sockets.add(client);
    this.#sockets.add(upstream);
    // Either side failing or closing ends both: a proxy must not keep half a connection open.
    const end = (): void => {
      client.destroy();
      upstream.destroy();
      this.#sockets.delete(client);
      this.#sockets.delete(upstream);
    };
    for (const socket of [client, upstream]) {
      socket.on('error', end);
      socket.on('close', end);
    }
    client.on('data', (chunk: Buffer) => void (this.#stalled || upstream.write(chunk)));
    upstream.on('data', (chunk: Buffer) => void (this.#stalled || client.write(chunk)));
  }
}
