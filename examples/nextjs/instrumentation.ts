// instrumentation.ts, at the project's root (beside app/): Next.js calls register() once per server start,
// never during `next build`. The inbox's tables, if you do not keep them in your Prisma migrations.
// #region nextjs-prisma-migrate
export async function register() {
  if (process.env.NEXT_RUNTIME !== 'nodejs') return; // the Edge runtime has no pg
  const { getPaymentsIpn } = await import('./lib/payments-ipn');
  // Safe on every start, from every instance at once: CREATE ... IF NOT EXISTS.
  await getPaymentsIpn().store.migrate();
}
// #endregion nextjs-prisma-migrate
