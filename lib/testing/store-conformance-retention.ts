import { dead, delivered } from './store-conformance-entries.js';
import { must, same, type Rule } from './store-conformance-kit.js';

const HOUR = 3_600_000;

/** The rules of retention (the purge of dead entries, the blanking of the customer's data) and the audit log. */
export const RETENTION_RULES: Rule[] = [
  {
    name: 'purge-dead',
    needs: 'durable',
    async run(kit) {
      const gone = await dead(kit, kit.key('purge-dead'));
      const done = await delivered(kit, kit.key('purge-dead-delivered'));
      const at = gone.updatedAt.getTime();
      same(await kit.store.purge(new Date(at), 'dead'), 0, `purge(its updatedAt, 'dead') of ${gone.key}`);
      same(
        await kit.store.purge(new Date(at + HOUR), 'dead'),
        1,
        "purge(an hour later, 'dead') of one dead entry",
      );
      must((await kit.store.get(gone.key)) === undefined, `get(${gone.key}) found the purged dead entry`);
      same(
        (await kit.entry(done.key)).status,
        'delivered',
        `status of ${done.key} after a purge of the dead`,
      );
    },
  },
  {
    name: 'redact',
    needs: 'redact',
    async run(kit) {
      const personal = { customer_name: 'Ada Lovelace', destination: '0700000000', amount: 2500 };
      const [doneKey, goneKey] = [kit.key('redact-delivered'), kit.key('redact-dead')];
      const done = await delivered(kit, doneKey, kit.record(doneKey, personal));
      const gone = await dead(kit, goneKey, kit.record(goneKey, personal));
      const waiting = kit.key('redact-received');
      must(
        await kit.store.receive(waiting, kit.record(waiting, personal), kit.lease()),
        `receive(${waiting})`,
      );
      const before = new Date(Math.max(done.receivedAt.getTime(), gone.receivedAt.getTime()) + HOUR);
      same(
        await kit.store.redact!(before),
        2,
        'redact() of a delivered and a dead entry (a received one stays)',
      );
      for (const key of [done.key, gone.key]) {
        const { record, transactionId } = await kit.entry(key);
        same(
          [record.customer_name, record.destination, record.amount, record.transaction_id],
          ['', '', 2500, transactionId],
          `the name, number, amount and id of ${key} after redact()`,
        );
      }
      same(
        (await kit.entry(waiting)).record.customer_name,
        'Ada Lovelace',
        `the name of the received ${waiting}`,
      );
      same(await kit.store.redact!(before), 0, 'a second redact() (nothing left to blank)');
    },
  },
  {
    name: 'audit',
    needs: 'audit',
    async run(kit) {
      const audit = kit.store.audit!;
      same(await audit.list(), [], 'audit.list() of a new store');
      await audit.record({
        action: 'replay',
        actor: 'ada',
        detail: { key: 'T1:SUCCESSFUL', replayed: true },
      });
      await audit.record({ action: 'purge', actor: 'cli:root', detail: { before: '2024-05-01', count: 3 } });
      const listed = await audit.list();
      same(
        listed.map(({ action, actor, detail }) => ({ action, actor, detail })),
        [
          { action: 'purge', actor: 'cli:root', detail: { before: '2024-05-01', count: 3 } },
          { action: 'replay', actor: 'ada', detail: { key: 'T1:SUCCESSFUL', replayed: true } },
        ],
        'audit.list(), newest first',
      );
      must(
        listed.every((entry) => entry.at instanceof Date && Math.abs(entry.at.getTime() - Date.now()) < HOUR),
        `audit entries' times (${listed.map((entry) => String(entry.at)).join(', ')}) are not Dates of now`,
      );
      same(
        (await audit.list({ limit: 1, offset: 1 })).map((entry) => entry.action),
        ['replay'],
        'list({ limit: 1, offset: 1 })',
      );
    },
  },
  {
    // ipn.pause() on one instance holds every instance over the store: the flag is the store's.
    name: 'pause-switch',
    needs: 'pauseSwitch',
    async run(kit) {
      const flag = kit.store.pauseSwitch!;
      same(await flag.read(), false, 'pauseSwitch.read() of a new store');
      await flag.write(true);
      same(await flag.read(), true, 'pauseSwitch.read() after write(true)');
      await flag.write(true); // twice is once
      same(await flag.read(), true, 'pauseSwitch.read() after a second write(true)');
      await flag.write(false);
      same(await flag.read(), false, 'pauseSwitch.read() after write(false)');
    },
  },
];
