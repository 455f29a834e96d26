-- What PostgresStore.migrate() runs: postgresSchemaSql('ipn_inbox') from ipn-kit/postgres, which
-- test/docs/postgres-schema.test.ts checks this file against. docs/stores-and-delivery.md quotes it.
-- #region schema
CREATE TABLE IF NOT EXISTS "ipn_inbox" (
  key text PRIMARY KEY,
  transaction_id text NOT NULL,
  state text NOT NULL,
  record jsonb NOT NULL,
  status text NOT NULL CHECK (status IN ('received', 'delivered', 'failed', 'dead')),
  attempts integer NOT NULL DEFAULT 0,
  last_error text,
  received_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  next_attempt_at timestamptz NOT NULL DEFAULT now(),
  delivered_at timestamptz,
  lease_id text,
  lease_until timestamptz,
  CHECK (key = transaction_id || ':' || state)
);
CREATE INDEX IF NOT EXISTS "ipn_inbox_due_idx" ON "ipn_inbox" (status, next_attempt_at);
CREATE TABLE IF NOT EXISTS "ipn_inbox_schema" (
  version integer PRIMARY KEY,
  name text NOT NULL,
  applied_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO "ipn_inbox_schema" (version, name) VALUES (1, 'the inbox and its index of due entries') ON CONFLICT (version) DO NOTHING;
CREATE TABLE IF NOT EXISTS "ipn_inbox_expected" (
  transaction_id text PRIMARY KEY,
  custom_data text,
  amount double precision,
  expected_at bigint NOT NULL,
  due_at bigint NOT NULL,
  attempts integer NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS "ipn_inbox_states" (
  transaction_id text PRIMARY KEY,
  state text NOT NULL,
  decided_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS "ipn_inbox_audit" (
  id bigserial PRIMARY KEY,
  at timestamptz NOT NULL DEFAULT now(),
  action text NOT NULL,
  actor text NOT NULL,
  detail json NOT NULL
);
CREATE TABLE IF NOT EXISTS "ipn_inbox_schema" (
  version integer PRIMARY KEY,
  name text NOT NULL,
  applied_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO "ipn_inbox_schema" (version, name) VALUES (2, 'the expectations, lifecycle and audit tables') ON CONFLICT (version) DO NOTHING;
CREATE TABLE IF NOT EXISTS "ipn_inbox_control" (
  name text PRIMARY KEY,
  value text NOT NULL,
  updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS "ipn_inbox_schema" (
  version integer PRIMARY KEY,
  name text NOT NULL,
  applied_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO "ipn_inbox_schema" (version, name) VALUES (3, 'the control table (a pause for every instance)') ON CONFLICT (version) DO NOTHING;
ALTER TABLE "ipn_inbox_expected" ADD COLUMN IF NOT EXISTS account text;
CREATE TABLE IF NOT EXISTS "ipn_inbox_schema" (
  version integer PRIMARY KEY,
  name text NOT NULL,
  applied_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO "ipn_inbox_schema" (version, name) VALUES (4, 'the expectations'' account (several API keys)') ON CONFLICT (version) DO NOTHING;
ALTER TABLE "ipn_inbox_control" ADD COLUMN IF NOT EXISTS until_ms bigint;
INSERT INTO "ipn_inbox_control" (name, value, until_ms)
SELECT 'sweep', coalesce(custom_data, ''), due_at FROM "ipn_inbox_expected" WHERE transaction_id = ''
ON CONFLICT (name) DO NOTHING;
DELETE FROM "ipn_inbox_expected" WHERE transaction_id = '';
DO $$ BEGIN
  IF NOT EXISTS (
    SELECT 1 FROM pg_constraint WHERE conrelid = to_regclass('"ipn_inbox_expected"') AND conname = 'ipn_kit_no_sweep_lock'
  ) THEN
    ALTER TABLE "ipn_inbox_expected" ADD CONSTRAINT ipn_kit_no_sweep_lock CHECK (transaction_id <> '') NOT VALID;
  END IF;
END $$;
CREATE TABLE IF NOT EXISTS "ipn_inbox_schema" (
  version integer PRIMARY KEY,
  name text NOT NULL,
  applied_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO "ipn_inbox_schema" (version, name) VALUES (5, 'the sweep''s lock in the control table') ON CONFLICT (version) DO NOTHING;
CREATE OR REPLACE FUNCTION "ipn_inbox_mark"(mark_key text, mark_lease text) RETURNS void
  LANGUAGE plpgsql AS $ipn_kit$ BEGIN
            UPDATE "ipn_inbox" SET status = 'delivered', delivered_at = now(), lease_id = NULL, lease_until = NULL, updated_at = now()
            WHERE key = mark_key AND lease_id = mark_lease;
            IF NOT FOUND THEN
              RAISE EXCEPTION 'ipn-kit: the lease on % was lost', mark_key USING ERRCODE = 'IK001';
            END IF;
          END $ipn_kit$;
CREATE TABLE IF NOT EXISTS "ipn_inbox_schema" (
  version integer PRIMARY KEY,
  name text NOT NULL,
  applied_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO "ipn_inbox_schema" (version, name) VALUES (6, 'the delivered mark as a function (PostgreSQL)') ON CONFLICT (version) DO NOTHING;
CREATE TABLE IF NOT EXISTS "ipn_inbox_claims" (
  key text PRIMARY KEY,
  token text NOT NULL,
  claimed_at timestamptz NOT NULL DEFAULT now(),
  expires_at timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS "ipn_inbox_claims_at_idx" ON "ipn_inbox_claims" (claimed_at);
DO $$ BEGIN
  IF NOT EXISTS (
    SELECT 1 FROM pg_constraint WHERE conrelid = to_regclass('"ipn_inbox"') AND conname = 'ipn_kit_no_claim_marker'
  ) THEN
    ALTER TABLE "ipn_inbox" ADD CONSTRAINT ipn_kit_no_claim_marker
      CHECK (NOT (record = '{}'::jsonb AND status = 'delivered' AND lease_id IS NOT NULL)) NOT VALID;
  END IF;
END $$;
CREATE OR REPLACE FUNCTION "ipn_inbox_older_claim"() RETURNS trigger
  LANGUAGE plpgsql AS $ipn_kit$
DECLARE
  held boolean;
BEGIN
  BEGIN
    EXECUTE format('SELECT true FROM %I.%I WHERE key = %L FOR KEY SHARE', TG_TABLE_SCHEMA, TG_TABLE_NAME, NEW.key)
      INTO held;
  EXCEPTION WHEN insufficient_privilege THEN
    EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I.%I WHERE key = %L)', TG_TABLE_SCHEMA, TG_TABLE_NAME, NEW.key)
      INTO held;
  END;
  IF held THEN
    RETURN NULL;
  END IF;
  RETURN NEW;
END $ipn_kit$;
DO $$ BEGIN
  IF NOT EXISTS (
    SELECT 1 FROM pg_trigger WHERE tgrelid = to_regclass('"ipn_inbox"') AND tgname = 'ipn_kit_older_claim'
  ) THEN
    CREATE TRIGGER ipn_kit_older_claim BEFORE INSERT ON "ipn_inbox" FOR EACH ROW
      WHEN (NEW.status = 'delivered' AND NEW.lease_id IS NOT NULL AND NEW.record = '{}'::jsonb)
      EXECUTE PROCEDURE "ipn_inbox_older_claim"();
  END IF;
END $$;
CREATE TABLE IF NOT EXISTS "ipn_inbox_schema" (
  version integer PRIMARY KEY,
  name text NOT NULL,
  applied_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO "ipn_inbox_schema" (version, name) VALUES (7, 'the claims table (at-most-once claims out of the inbox)') ON CONFLICT (version) DO NOTHING;
-- #endregion schema
