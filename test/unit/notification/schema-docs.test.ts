import { join } from 'node:path';
import ts from 'typescript';

// What an editor shows on a notification's fields: every field of IpnNotification has its TSDoc, so a
// partner hovering `n.amount` learns its unit and currency, or that nobody knows.
const root = join(__dirname, '../../..');
const file = join(root, 'lib/notification/schema.ts');
const program = ts.createProgram([file], { strict: true, noEmit: true, skipLibCheck: true });
const checker = program.getTypeChecker();
const source = program.getSourceFile(file);
const alias = source?.statements.find(
  (node): node is ts.TypeAliasDeclaration =>
    ts.isTypeAliasDeclaration(node) && node.name.text === 'IpnNotification',
);
const fields = alias ? checker.getTypeAtLocation(alias.name).getProperties() : [];
const docOf = (field: ts.Symbol) => ts.displayPartsToString(field.getDocumentationComment(checker));

test('IpnNotification has every field of the interface, extra and rawState, and nothing else', () => {
  expect(fields.map((field) => field.name).sort()).toEqual(
    [
      ...['transaction_id', 'state', 'custom_data', 'amount', 'benefice', 'commission', 'fee', 'destination'],
      ...['response', 'error', 'service_id', 'customer_name', 'ipn_url', 'provider_id', 'sms_link'],
      ...['created_at', 'updated_at', 'ipn_state', 'w_amount_after_transaction', 'p_last_wallet_amount'],
      ...['p_new_wallet_amount', 'p_id', 'hash', 'extra', 'rawState'],
    ].sort(),
  );
});

test.each(fields.map((field) => [field.name, field] as const))('the field %s has TSDoc', (_name, field) => {
  expect(docOf(field).length).toBeGreaterThan(20);
});

test("amount's TSDoc says what is known of its currency and unit", () => {
  const amount = docOf(fields.find((field) => field.name === 'amount')!);
  expect(amount).toMatch(/currency/);
  expect(amount).toMatch(/unit/);
});
