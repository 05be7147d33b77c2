/** The soak's command-line options. */
import { parseArgs } from 'node:util';
import { FAULT_TYPES, type FaultType } from './faults.js';

export const HELP = `Usage: npm run soak -- [options]

  --minutes N       minutes of load and faults (default 2); then drain, stop, verify
  --quick           the CI run: 1 minute
  --seed N          seed of the workload and the fault plan (default: random, printed)
  --workers N       worker processes (default 4)
  --concurrency N   jobs at once per worker (default 8)
  --lease-ms N      the workers' lease (default 5000: faults resolve within the run)
  --rate N          jobs per second enqueued, on average (default 10)
  --faults a,b      only these fault types (default: all): ${FAULT_TYPES.join(', ')}
  --report FILE     also write the result as Markdown to FILE
  --keep            keep the run folder (server data, records, logs) for inspection
`;

export interface SoakOptions {
  minutes: number;
  seed: number;
  workers: number;
  concurrency: number;
  leaseMs: number;
  rate: number;
  report: string | null;
  faults: FaultType[];
  keep: boolean;
  quick: boolean;
}

/** Parses argv; null for --help. Throws on a bad value. */
export function parseOptions(argv: string[]): SoakOptions | null {
  const { values } = parseArgs({
    args: argv,
    options: {
      minutes: { type: 'string' },
      quick: { type: 'boolean', default: false },
      seed: { type: 'string' },
      workers: { type: 'string' },
      concurrency: { type: 'string' },
      'lease-ms': { type: 'string' },
      rate: { type: 'string' },
      faults: { type: 'string' },
      report: { type: 'string' },
      keep: { type: 'boolean', default: false },
      help: { type: 'boolean', default: false },
    },
  });
  if (values.help) return null;
  const num = (value: string | undefined, fallback: number, name: string, min: number) => {
    if (value === undefined) return fallback;
    const n = Number(value);
    if (!Number.isFinite(n) || n < min) throw new Error(`--${name} must be a number ≥ ${min}`);
    return n;
  };
  return {
    minutes: num(values.minutes, values.quick ? 1 : 2, 'minutes', 0.1),
    seed: Math.floor(num(values.seed, Math.floor(Math.random() * 2 ** 31), 'seed', 0)),
    workers: Math.floor(num(values.workers, 4, 'workers', 2)),
    concurrency: Math.floor(num(values.concurrency, 8, 'concurrency', 1)),
    leaseMs: Math.floor(num(values['lease-ms'], 5_000, 'lease-ms', 1_000)),
    rate: num(values.rate, 10, 'rate', 0.1),
    report: values.report ?? null,
    faults: faultTypes(values.faults),
    keep: values.keep,
    quick: values.quick,
  };
}

function faultTypes(list: string | undefined): FaultType[] {
  if (list === undefined) return [...FAULT_TYPES];
  const names = list.split(',').map((name) => name.trim());
  for (const name of names) {
    if (!(FAULT_TYPES as readonly string[]).includes(name)) {
      throw new Error(`--faults: unknown fault type "${name}" (known: ${FAULT_TYPES.join(', ')})`);
    }
  }
  return names as FaultType[];
}
