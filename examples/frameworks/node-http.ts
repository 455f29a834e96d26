import type { IpnRouter } from 'ipn-kit';

// #region node-http
import { createServer } from 'node:http';

export function createIpnServer(ipn: IpnRouter) {
  return createServer((req, res) => {
    if (req.url?.split('?')[0] === '/ipn') return ipn(req, res);
    res.writeHead(404).end();
  }); // then: .listen(3000)
}
// #endregion node-http
