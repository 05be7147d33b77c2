import { ValidationError } from '../errors.js';

const UNITS: Record<string, number> = {
  ms: 1,
  s: 1_000,
  m: 60_000,
  h: 3_600_000,
  d: 86_400_000,
  w: 604_800_000,
};

/**
 * Parses a duration for people: `250ms`, `30s`, `5m`, `2h`, `7d`, `1w`, combinations such as
 * `1h30m`, or a bare number of milliseconds. Returns milliseconds.
 *
 * @example parseDuration('7d') // 604800000
 */
export function parseDuration(text: string, field = 'duration'): number {
  const trimmed = text.trim();
  if (/^\d+(\.\d+)?$/.test(trimmed)) return Math.round(Number(trimmed));
  const parts = [...trimmed.matchAll(/(\d+(?:\.\d+)?)(ms|s|m|h|d|w)/g)];
  const consumed = parts.map((p) => p[0]).join('');
  if (parts.length === 0 || consumed !== trimmed.replaceAll(' ', '')) {
    throw new ValidationError(
      field,
      `must be a duration like 30s, 5m, 2h, 7d or 1h30m, got ${JSON.stringify(text)}`,
    );
  }
  return Math.round(
    parts.reduce((sum, [, value, unit]) => sum + Number(value) * (UNITS[unit as string] ?? 0), 0),
  );
}

/** A short human form of a duration: `850 ms`, `12 s`, `4 min`, `3 h`, `2 d`. */
export function formatDuration(ms: number): string {
  const abs = Math.abs(ms);
  if (abs < 1_000) return `${Math.round(ms)} ms`;
  if (abs < 60_000) return `${Math.round(ms / 1_000)} s`;
  if (abs < 3_600_000) return `${Math.round(ms / 60_000)} min`;
  if (abs < 86_400_000) return `${Math.round(ms / 3_600_000)} h`;
  return `${Math.round(ms / 86_400_000)} d`;
}

/** `5 min ago` / `in 30 s` relative to `now`. */
export function formatRelative(date: Date, now: Date = new Date()): string {
  const delta = date.getTime() - now.getTime();
  if (Math.abs(delta) < 1_000) return 'now';
  return delta < 0 ? `${formatDuration(-delta)} ago` : `in ${formatDuration(delta)}`;
}
