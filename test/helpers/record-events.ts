import type { IpnEvents, IpnRouter } from '../../lib/index.js';

type IpnEventName = keyof IpnEvents;

/** One emitted event, in emission order. */
export interface Recorded {
  name: IpnEventName;
  payload: any;
}

const NAMES: IpnEventName[] = [
  'notification',
  'successful',
  'failed',
  'duplicate',
  'invalid',
  'error',
  'rejected',
  'dead',
  'stale',
  'conflict',
];

/** Records every event of a router, so tests can assert names, payloads and counts. */
export function recordEvents(ipn: IpnRouter<any>) {
  const events: Recorded[] = [];
  for (const name of NAMES) ipn.on(name, (payload: unknown) => void events.push({ name, payload }));
  return {
    events,
    /** Names of the events, in order. */
    names: () => events.map((event) => event.name),
    /** Payloads of the events of one name. */
    of: (name: IpnEventName) => events.filter((event) => event.name === name).map((event) => event.payload),
    count: (name: IpnEventName) => events.filter((event) => event.name === name).length,
  };
}
