import { BullMQDriver } from './bullmq.js';
import { BullMQPgDriver } from './bullmq-pg.js';
import { GraphileWorkerDriver } from './graphile-worker.js';
import { PgBossDriver } from './pg-boss.js';
import { SkiplockDriver } from './skiplock.js';
import type { BenchEnv, SystemDriver, SystemName } from './types.js';

export function createDriver(name: SystemName, env: BenchEnv): SystemDriver {
  switch (name) {
    case 'skiplock':
      return new SkiplockDriver(env);
    case 'graphile-worker':
      return new GraphileWorkerDriver(env);
    case 'pg-boss':
      return new PgBossDriver(env);
    case 'bullmq':
      return new BullMQDriver(env);
    case 'bullmq-pg':
      return new BullMQPgDriver(env);
  }
}
