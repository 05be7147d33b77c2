/**
 * The admin server's read route (issue 26) on a real database: the "replica" is the same
 * database through `readConnectionString` (not in recovery: it answers, lag 0) or a closed port.
 *
 * - While the replica has not answered yet (`checking`) the reads go to the primary queue, and
 *   the state reported with a read is the one that routed it, even when the probe finishes
 *   during the read (the streaming-replica test once saw `status: 'up'` with the primary's
 *   `replicaLagMs: null`). Deliberate break seen failing: readReporting() returning `this.state`
 *   after the read (got 'up').
 * - A replica that refuses connections: down, reads on the primary, the error kept, onChange
 *   told once.
 */
import { expect, test } from 'vitest';
import { ReadRoute, type ReplicaState } from '../../src/admin/read-route.js';
import type { Queue } from '../../src/queue.js';
import { useTestDatabase } from '../support/database.js';
import { freePort } from '../support/ports.js';

const db = useTestDatabase();

test('checking: a read goes to the primary and reports checking, even if the probe ends meanwhile', async () => {
  const primary = db.queue();
  const replica = db.queue({ readConnectionString: db.url });
  const route = new ReadRoute(replica, primary);
  expect(route.state.status).toBe('checking');
  let probe: Promise<void> | undefined;
  const { value, replica: state } = await route.readReporting(async (q: Queue) => {
    probe = route.start();
    await probe; // the replica answers while this read is in flight
    return q === primary ? 'primary' : 'replica';
  });
  expect(value).toBe('primary');
  expect(state.status).toBe('checking');
  expect(route.state.status).toBe('up');
  const next = await route.readReporting(async (q: Queue) => (q === primary ? 'primary' : 'replica'));
  expect(next).toMatchObject({ value: 'replica', replica: { status: 'up', error: null } });
  expect((await route.ops()).replicaLagMs).toBe(0);
  route.stop();
});

test('a replica that refuses connections: down, reads on the primary, onChange told once', async () => {
  const primary = db.queue();
  const replica = db.queue({ readConnectionString: `postgres://nobody@127.0.0.1:${await freePort()}/x` });
  const changes: ReplicaState[] = [];
  const route = new ReadRoute(replica, primary, { probeMs: 60_000, onChange: (s) => changes.push(s) });
  await route.start();
  expect(route.state).toMatchObject({ status: 'down', error: expect.stringMatching(/ECONNREFUSED/) });
  expect(changes.map((s) => s.status)).toEqual(['down']);
  const { id } = await primary.enqueue('route.down', null);
  expect((await route.get(id))?.id).toBe(id); // from the primary
  expect((await route.ops()).replicaLagMs).toBeNull();
  route.stop();
});
