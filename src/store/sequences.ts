/**
 * Sequences (SPEC §11): the listing of sequence keys with their head and how many jobs wait
 * behind it. The enforcement itself is in the database (migration 19: a unique index, the
 * triggers that advance a key, the claims' pass over arrived keys; migration 24: a head waiting
 * for an event holds its key — listed as the head, status 'waiting').
 */
import type { Executor } from '../db/executor.js';
import { SEQUENCE_HOLDS, SEQUENCE_QUEUED } from '../db/sequence-hold.js';
import type { JobStatus, SequenceInfo } from '../types.js';
import { StatementFamily } from './runner.js';

/** The statements of this family for the schema whose quoted identifier is `s`. */
export function sequenceSql(s: string) {
  const jobs = `${s}.jobs`;
  return {
    /**
     * §11 the keys with unfinished jobs after $1 (keyset, key order), at most $2: one descent of
     * each key index per key (a skip scan over jobs_sequence_head_idx and
     * jobs_sequence_waiting_idx, never a scan of a key's jobs), then per key its head — the job
     * that holds it (pending, running, dead, or waiting for an event), else its next queued job
     * (arrived, not yet advanced) — and its queue (the queued jobs behind the head).
     */
    sequencesAll: `
      WITH RECURSIVE keys(key) AS (
        (SELECT least(
           (SELECT h.sequence FROM ${jobs} AS h
            WHERE h.sequence IS NOT NULL AND ${SEQUENCE_HOLDS('h.')} AND h.sequence > $1::text
            ORDER BY h.sequence LIMIT 1),
           (SELECT w.sequence FROM ${jobs} AS w
            WHERE w.sequence IS NOT NULL AND ${SEQUENCE_QUEUED('w.')} AND w.sequence > $1::text
            ORDER BY w.sequence LIMIT 1)))
        UNION ALL
        SELECT least(
           (SELECT h.sequence FROM ${jobs} AS h
            WHERE h.sequence IS NOT NULL AND ${SEQUENCE_HOLDS('h.')} AND h.sequence > k.key
            ORDER BY h.sequence LIMIT 1),
           (SELECT w.sequence FROM ${jobs} AS w
            WHERE w.sequence IS NOT NULL AND ${SEQUENCE_QUEUED('w.')} AND w.sequence > k.key
            ORDER BY w.sequence LIMIT 1))
        FROM keys AS k WHERE k.key IS NOT NULL
      ), page AS (
        SELECT key FROM keys WHERE key IS NOT NULL LIMIT $2
      )
      SELECT p.key, head.id::text AS head_id, head.status AS head_status,
             (SELECT count(*) FROM ${jobs} AS w
              WHERE w.sequence = p.key AND ${SEQUENCE_QUEUED('w.')} AND w.sequence IS NOT NULL
                AND w.id <> head.id)::int AS queued
      FROM page AS p
      CROSS JOIN LATERAL (
        SELECT x.id, x.status FROM (
          (SELECT h.id, h.status, 0 AS rank FROM ${jobs} AS h
           WHERE h.sequence = p.key AND ${SEQUENCE_HOLDS('h.')} AND h.sequence IS NOT NULL)
          UNION ALL
          (SELECT w.id, w.status, 1 FROM ${jobs} AS w
           WHERE w.sequence = p.key AND ${SEQUENCE_QUEUED('w.')} AND w.sequence IS NOT NULL
           ORDER BY w.sequence, w.id LIMIT 1)
        ) AS x ORDER BY x.rank LIMIT 1
      ) AS head
      ORDER BY p.key`,

    /**
     * §11 the blocked keys (head dead) after $1, at most $2: the dead heads through
     * jobs_sequence_head_idx in key order, and each key's queue.
     */
    sequencesBlocked: `
      SELECT h.sequence AS key, h.id::text AS head_id, h.status AS head_status,
             (SELECT count(*) FROM ${jobs} AS w
              WHERE w.sequence = h.sequence AND ${SEQUENCE_QUEUED('w.')} AND w.sequence IS NOT NULL)::int AS queued
      FROM ${jobs} AS h
      WHERE h.sequence IS NOT NULL AND ${SEQUENCE_HOLDS('h.')} AND h.sequence > $1::text AND h.status = 'dead'
      ORDER BY h.sequence
      LIMIT $2`,
  };
}

export class SequenceStatements extends StatementFamily<ReturnType<typeof sequenceSql>> {
  /** A page of sequence keys (all, or only the blocked ones) after `after`, in key order. */
  async list(db: Executor, blocked: boolean, after: string, limit: number): Promise<SequenceInfo[]> {
    const rows = await this.run<{ key: string; head_id: string; head_status: JobStatus; queued: number }>(
      db,
      blocked ? this.sql.sequencesBlocked : this.sql.sequencesAll,
      [after, limit],
    );
    return rows.map((row) => ({
      key: row.key,
      headId: String(row.head_id),
      headStatus: row.head_status,
      queued: Number(row.queued),
    }));
  }
}
