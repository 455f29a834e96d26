// Firebase Functions (2nd gen): the functions/src/index.ts of a Firebase project, deployed with
// `firebase deploy --only functions`. Run by test/integration/firebase.test.ts.
// #region firebase
import { onRequest } from 'firebase-functions/v2/https';
import { ipnRouter } from 'ipn-kit';

// Module scope: one router per instance. Firebase runs several instances: in production give it a store
// they share (PostgresStore or RedisStore) with delivery: 'at-least-once', and a scheduled drain().
export const router = ipnRouter();

// Firebase parses the body before the function runs and keeps its bytes on req.rawBody: the router reads
// those bytes, so authenticate (an HMAC over: 'raw') sees exactly what was sent.
export const ipn = onRequest(router);
// #endregion firebase
