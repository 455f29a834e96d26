import Fastify from 'fastify';
import type { IpnRouter } from 'ipn-kit';

// #region fastify
import { ipnPlugin } from 'ipn-kit/fastify';

export async function createFastifyApp(ipn: IpnRouter) {
  const app = Fastify();
  // Encapsulated: the route reads its own body, whatever content-type parsers the rest of the app has.
  await app.register(ipnPlugin, { prefix: '/ipn', router: ipn });
  return app; // then: await app.listen({ port: 3000 })
}
// #endregion fastify
