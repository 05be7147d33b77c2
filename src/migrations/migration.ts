/** One forward-only schema change. `sql` receives the quoted schema identifier. */
export interface Migration {
  /** 1, 2, 3…: applied in order, each exactly once per schema. */
  version: number;
  name: string;
  sql: (quotedSchema: string) => string;
}
