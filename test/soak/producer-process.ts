/**
 * The soak's producer process: single `enqueue` and `enqueueMany` calls at a steady rate
 * (see workload.ts for the jobs), and now and then a `cancel` of a recent job. Every call and
 * its answer — or its error — goes to the records file. A failed call is not retried: the
 * verifier finds out from the table whether its rows were committed anyway.
 *
 * Stops on SIGTERM: the call in flight finishes, the queue closes, the process ends.
 */
import { Queue } from '../../src/index.js';
import { type ProducerRecord, RecordWriter } from './records.js';
import { Rng } from './rng.js';
import { work } from './tasks.js';
import { nextSpec } from './workload.js';

export interface ProducerProcessConfig {
  name: string;
  connectionString: string;
  recordsFile: string;
  seed: number;
  /** Jobs per second, on average. */
  rate: number;
}

const config = JSON.parse(process.argv[2] ?? '{}') as ProducerProcessConfig;
const out = new RecordWriter<ProducerRecord>(config.recordsFile);
process.channel?.unref();
process.on('disconnect', () => process.kill(process.pid, 'SIGKILL'));

const rng = new Rng(config.seed);
const queue = new Queue({ connectionString: config.connectionString });
const recent: string[] = [];
let stopping = false;
let refs = 0;
process.once('SIGTERM', () => {
  stopping = true;
});

out.write({ type: 'life', t: Date.now(), what: 'started' });
/** Mean jobs per tick: 70 % single enqueues, 30 % batches of 3–12. */
const meanPerTick = 0.7 + 0.3 * 7.5;
let lastCancel = Date.now();
while (!stopping) {
  const t0 = Date.now();
  if (rng.chance(0.3)) await enqueueMany(rng.int(3, 12));
  else await enqueueOne();
  if (Date.now() - lastCancel > 3_000) {
    lastCancel = Date.now();
    await cancelOne();
  }
  const tickMs = (meanPerTick / config.rate) * 1_000 * (0.5 + rng.next());
  await work(Math.max(0, tickMs - (Date.now() - t0)));
}
await queue.close();
out.write({ type: 'life', t: Date.now(), what: 'stopped' });

function newRef(): string {
  return `${config.name}-${++refs}`;
}

async function enqueueOne(): Promise<void> {
  const spec = nextSpec(rng, newRef());
  const { task, payload, ...options } = spec;
  const record: ProducerRecord = { type: 'enqueue', t: Date.now(), many: false, refs: [refOf(payload)] };
  try {
    const result = await queue.enqueue(task, payload, options);
    record.results = [result];
    if (result.created) remember(result.id);
  } catch (error) {
    record.error = errorLine(error);
    await work(200); // the database is away: do not spin
  }
  out.write(record);
}

async function enqueueMany(count: number): Promise<void> {
  const specs = Array.from({ length: count }, () => nextSpec(rng, newRef()));
  const record: ProducerRecord = {
    type: 'enqueue',
    t: Date.now(),
    many: true,
    refs: specs.map((s) => refOf(s.payload)),
  };
  try {
    const results = await queue.enqueueMany(specs);
    record.results = results;
    for (const result of results) if (result.created) remember(result.id);
  } catch (error) {
    record.error = errorLine(error);
    await work(200);
  }
  out.write(record);
}

async function cancelOne(): Promise<void> {
  const id = recent.length > 0 ? rng.pick(recent) : undefined;
  if (!id) return;
  const record: ProducerRecord = { type: 'cancel', t: Date.now(), id };
  try {
    record.ok = await queue.cancel(id);
  } catch (error) {
    record.error = errorLine(error);
  }
  out.write(record);
}

function remember(id: string): void {
  recent.push(id);
  if (recent.length > 50) recent.shift();
}

function refOf(payload: unknown): string {
  return (payload as { ref: string }).ref;
}

function errorLine(error: unknown): string {
  return (error instanceof Error ? `${error.name}: ${error.message}` : String(error)).split('\n')[0] ?? '';
}
