/**
 * The optional OpenTelemetry API (SPEC §9): `@opentelemetry/api` is an optional peer dependency,
 * looked for once per process by a dynamic import — never a static one, so an application
 * without it loads and runs Skiplock exactly as before. A failed import means "no telemetry".
 * Only types are imported statically here (erased from the build).
 */

/** The module `@opentelemetry/api`. */
export type OtelApi = typeof import('@opentelemetry/api');

let loading: Promise<OtelApi | null> | null = null;
/** The API once the import settled: the module, or null when it is not installed. */
let loaded: OtelApi | null | undefined;

/** Starts the import on first call (later calls share it); resolves with the API, or null. */
export function loadOtelApi(): Promise<OtelApi | null> {
  loading ??= import('@opentelemetry/api').then(
    (api) => {
      loaded = api;
      return api;
    },
    () => {
      loaded = null;
      return null;
    },
  );
  return loading;
}

/** The API if its import has settled: the module, null when absent, undefined while loading. */
export function otelApi(): OtelApi | null | undefined {
  return loaded;
}
