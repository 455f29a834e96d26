/**
 * `ipn-kit/fastify`: the IPN route as a Fastify plugin, `app.register(ipnPlugin, { prefix, router })`.
 * Fastify is an optional peer dependency, loaded only by your app: this entry point imports its types only.
 * @packageDocumentation
 */
export { ipnPlugin } from './router/fastify-plugin.js';
export type { IpnPluginOptions } from './router/fastify-plugin.js';
