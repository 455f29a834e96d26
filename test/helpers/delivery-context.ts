import { createDeliveryContext } from '../../lib/delivery/delivery-context.js';
import { createSafeEmitter } from '../../lib/delivery/safe-emitter.js';
import { resolveOptions, type Options } from '../../lib/config/options.js';
import { ipnNotificationSchema, type IpnNotification } from '../../lib/notification/schema.js';
import type { IpnEventName } from '../../lib/delivery/events.js';
import type { Logger } from '../../lib/observability/logger.js';
import { uniquePayload } from './payloads.js';

/** A logger whose calls the tests can read. */
export function recordingLogger() {
  const lines: Array<{ level: keyof Logger; message: string }> = [];
  const at =
    (level: keyof Logger) =>
    (_fields: unknown, message?: string): void =>
      void lines.push({ level, message: message ?? '' });
  const logger: Logger = { debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') };
  return { logger, lines, said: (level: keyof Logger) => lines.filter((l) => l.level === level) };
}

/**
 * What the delivery modules are built on in `ipnRouter()`: the resolved options, the safe emitter and the
 * delivery context, wired as the router wires them, with the `error`, `rejected`, `dead` and `stale` events
 * recorded. For unit tests of one
 * delivery module at a time, without a transport.
 */
export function deliveryHarness(options: Partial<Options> = {}) {
  const { logger, lines, said } = recordingLogger();
  const resolved = resolveOptions({ logger, ...options });
  // What `on` returns: the emitter itself, as the router's `on` returns the router.
  const emitter: ReturnType<typeof createSafeEmitter<undefined>> = createSafeEmitter<undefined>(
    resolved.logger,
    () => emitter.methods,
  );
  const { methods, emit, emitAndWait, track } = emitter;
  const context = createDeliveryContext<undefined>(resolved, { emit, emitAndWait, track });
  const events: Array<{ name: IpnEventName; payload: any }> = [];
  // Not the notification events: whether they have a listener is what some tests are about.
  const names: IpnEventName[] = ['error', 'rejected', 'dead', 'stale'];
  for (const name of names) methods.on(name, (payload: unknown) => void events.push({ name, payload }));
  return {
    context,
    /** `on`, `off`... of the router's emitter: add the listeners under test. */
    ipn: methods,
    lines,
    said,
    events,
    of: (name: IpnEventName): any[] => events.filter((e) => e.name === name).map((e) => e.payload),
  };
}

/** A parsed SUCCESSFUL notification with a transaction id no other test uses. */
export function uniqueNotification(overrides: Record<string, unknown> = {}): IpnNotification {
  return ipnNotificationSchema.parse(uniquePayload(overrides));
}
