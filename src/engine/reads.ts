/**
 * The observability reads behind Queue (SPEC §3, §7): on the read replica when one is
 * configured (`engine.read`), except findActive, which decides about writes and reads the primary.
 */
import type { ListFilter } from '../store/observe.js';
import type { Job, JobDependencySummary, JobPage, JobStatus, OpsSnapshot, SequenceInfo } from '../types.js';
import type { Engine } from './engine.js';

export function getJob(engine: Engine, id: string): Promise<Job | null> {
  return engine.read((db) => engine.store.observe.get(db, id));
}

/** §10/§5 the first `limit` ids on each side of a job, and how many there are. */
export function dependencySummary(engine: Engine, id: string, limit: number): Promise<JobDependencySummary> {
  return engine.read((db) => engine.store.neighbours.summary(db, id, limit));
}

export function findActive(engine: Engine, dedupeKey: string): Promise<Job | null> {
  return engine.store.observe.findActive(engine.pool, dedupeKey);
}

export function listJobs(
  engine: Engine,
  { filter, limit }: { filter: ListFilter; limit: number },
): Promise<Job[]> {
  return engine.read((db) => engine.store.observe.list(db, filter, limit));
}

/** One bounded page: `next` is the last job's id on a full page, else where the scan stopped. */
export async function listPage(
  engine: Engine,
  { filter, limit }: { filter: ListFilter; limit: number },
): Promise<JobPage> {
  const { jobs, scannedTo } = await engine.read((db) => engine.store.observe.listPage(db, filter, limit));
  return { jobs, next: jobs.length === limit ? (jobs.at(-1)?.id ?? null) : scannedTo };
}

export async function counts(engine: Engine): Promise<Record<JobStatus, number>> {
  return (await engine.read((db) => engine.store.observe.counts(db))).counts;
}

/** The snapshot; the replica's lag is measured before the counts, so it bounds their age. */
export async function ops(engine: Engine): Promise<OpsSnapshot> {
  const replicaLagMs = await engine.replicaLag();
  const { stuckAfterMs } = engine.settings;
  const [{ counts, estimated }, extras] = await engine.read((db) =>
    Promise.all([engine.store.observe.counts(db), engine.store.observe.opsExtras(db, stuckAfterMs)]),
  );
  return { ...counts, ...extras, estimated, replicaLagMs };
}

export function liveByQueue(engine: Engine) {
  return engine.read((db) => engine.store.observe.liveByQueue(db));
}

export function throughput(engine: Engine, { bucketMs, windowMs }: { bucketMs: number; windowMs: number }) {
  return engine.read((db) => engine.store.observe.finishedPerBucket(db, bucketMs, windowMs));
}

/** §11 a page of sequence keys with their heads (all, or only those whose head is dead). */
export function sequences(
  engine: Engine,
  { blocked, after, limit }: { blocked: boolean; after: string; limit: number },
): Promise<SequenceInfo[]> {
  return engine.read((db) => engine.store.sequences.list(db, blocked, after, limit));
}
