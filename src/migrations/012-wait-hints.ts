import type { Migration } from './migration.js';

/**
 * SPEC §9 `queue.waitFor`: a completion hint for the jobs somebody waits for, and only those.
 * `wait_hint` is set by waitFor (never by a worker); when such a job reaches done, dead or
 * cancelled — or is deleted before it did (a completion under `retention: { completed: 'delete' }`)
 * — a trigger sends its id on the schema's "finished" channel, in the transaction that finished
 * it. Jobs nobody waits for pay one WHEN test per status change, and no NOTIFY (and so none of
 * NOTIFY's commit-time lock). The column has no index and no default: adding it is instant, and
 * setting it touches no indexed column (a HOT update). The channel is derived from the schema's
 * name as `finishedChannel` does in src/db/identifier.ts (hashed when too long for a name).
 */
export const waitHints: Migration = {
  version: 12,
  name: 'wait-hints',
  sql: (s) => `
ALTER TABLE ${s}.jobs ADD COLUMN wait_hint boolean;

CREATE FUNCTION ${s}.notify_finished() RETURNS trigger LANGUAGE plpgsql AS $fn$
DECLARE
  channel text := 'skiplock-done:' || TG_TABLE_SCHEMA;
BEGIN
  IF octet_length(channel) > 63 THEN
    channel := 'skiplock-done:' || left(encode(sha256(convert_to(TG_TABLE_SCHEMA, 'UTF8')), 'hex'), 40);
  END IF;
  PERFORM pg_notify(channel, (CASE WHEN TG_OP = 'DELETE' THEN OLD.id ELSE NEW.id END)::text);
  RETURN NULL;
END
$fn$;

CREATE TRIGGER finished_hint AFTER UPDATE OF status ON ${s}.jobs FOR EACH ROW
  WHEN (NEW.wait_hint AND NEW.status IN ('done', 'dead', 'cancelled') AND OLD.status IS DISTINCT FROM NEW.status)
  EXECUTE FUNCTION ${s}.notify_finished();

CREATE TRIGGER finished_hint_deleted AFTER DELETE ON ${s}.jobs FOR EACH ROW
  WHEN (OLD.wait_hint AND OLD.status NOT IN ('done', 'dead', 'cancelled'))
  EXECUTE FUNCTION ${s}.notify_finished();
`,
};
