import type { CrashRecoverySkipped, CrashRecoverySummary } from './crash-recovery.js';

/**
 * The crash scene as plain text for a terminal, every number as read from its database (PostgreSQL, or
 * SQLite with a line saying why); or, when the scene was skipped, one line saying why and how to run it.
 */
export function formatCrashRecovery(scene: CrashRecoverySummary | CrashRecoverySkipped): string {
  if ('skipped' in scene) {
    return (
      `The crash scene (a partner app killed mid-delivery, its payment credited once) was skipped: ${scene.skipped}. ` +
      'To run it, start PostgreSQL or set DATABASE_URL (postgres://user@host:5432/db), or install better-sqlite3.'
    );
  }
  const { transactionId, orderId, amount, ledger, afterKill, final } = scene;
  const credits = ledger.filter((row) => row.transaction_id === transactionId).length;
  const cells = [
    ['transaction_id', 'order_id', 'amount'],
    ...ledger.map((row) => [row.transaction_id, row.order_id, row.amount]),
  ];
  const widths = [0, 1, 2].map((column) => Math.max(...cells.map((row) => row[column]?.length ?? 0)));
  const table = cells.map((row) =>
    row
      .map((cell, column) => cell.padEnd(widths[column] ?? 0))
      .join('  ')
      .trimEnd(),
  );
  const rows = (n: number) => `${n} ${n === 1 ? 'row' : 'rows'}`;
  const sqlite = scene.database === 'SQLite';
  const same = sqlite ? 'file' : 'database';
  return [
    `A crash mid-delivery: ${scene.database} inbox, at least once, the credit written through the listener's db`,
    ...(scene.fallback === undefined
      ? []
      : [
          `${scene.fallback},`,
          'so the scene runs on SQLite, no server needed: the inbox and the ledger share one file, in a temporary folder.',
        ]),
    '',
    `The service notified ${transactionId} (${orderId}, ${amount} XOF) to the partner app (${scene.app},`,
    `a process of its own), which stored it in its inbox and answered ${scene.answered}.`,
    `Attempt ${afterKill.attempts}: the listener wrote the ledger row, then the app was killed (${scene.killedBy}) before its COMMIT.`,
    `  Right after the kill: ${rows(scene.rowsAfterKill)} for ${transactionId} in the ledger; the inbox entry is ` +
      `still ${afterKill.status}, not delivered.`,
    `Attempt ${scene.restartAttempt}: the app, restarted on the same ${same}, took the entry up once its lease ran ` +
      `out (leaseMs ${scene.leaseMs}),`,
    `  wrote the row again and committed: the inbox entry is ${final.status}.`,
    '',
    sqlite
      ? `The ledger (${scene.ledgerTable}, in ${scene.file}, no unique constraint), read back from SQLite:`
      : `The ledger (${scene.ledgerTable}, made for this run, no unique constraint), read back from PostgreSQL:`,
    ...table,
    '',
    ...(credits === 1
      ? [
          `1 row for ${transactionId}: credited exactly once. The first write was rolled back with its transaction when`,
          'the kill closed its connection; the second committed together with the inbox\'s "delivered" mark.',
          ...(sqlite ? ['The temporary folder and its file are removed.'] : []),
        ]
      : [`${rows(credits)} for ${transactionId}: credited ${credits} times, not exactly once.`]),
  ].join('\n');
}
