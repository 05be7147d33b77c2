/** The flags of `skiplock dev` (registered in dev.ts, acted on in dev-run.ts). */
export interface DevFlags {
  port?: number;
  dataDir: string;
  rate: number;
  demo: boolean;
}
