import type { IpnRouter } from 'ipn-kit';

// #region express
import express from 'express';

export function createExpressApp(ipn: IpnRouter) {
  const app = express();
  app.use('/ipn', ipn); // before express.json() and any CSRF or bot filter
  app.use(express.json()); // the rest of your app
  return app; // then: app.listen(3000)
}
// #endregion express
