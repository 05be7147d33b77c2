/** Option parsers for commander: each throws InvalidArgumentError with a message for people. */
import { InvalidArgumentError } from 'commander';
import { parseDuration } from '../core/duration.js';

export function integer(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n)) throw new InvalidArgumentError('must be an integer');
  return n;
}

export function positiveInt(value: string): number {
  const n = integer(value);
  if (n < 1) throw new InvalidArgumentError('must be a positive integer');
  return n;
}

export function duration(value: string): number {
  try {
    return parseDuration(value);
  } catch {
    throw new InvalidArgumentError('must be a duration like 30s, 5m, 2h or 7d');
  }
}

export function nameList(value: string): string[] {
  const names = value
    .split(',')
    .map((name) => name.trim())
    .filter(Boolean);
  if (names.length === 0) throw new InvalidArgumentError('must name at least one');
  return names;
}

export function json(value: string): unknown {
  try {
    return JSON.parse(value);
  } catch (error) {
    throw new InvalidArgumentError(
      `must be JSON (${error instanceof Error ? error.message : String(error)})`,
    );
  }
}

/** A TCP port, 0 (any free port) to 65535. */
export function port(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0 || n > 65_535)
    throw new InvalidArgumentError('must be a port from 0 to 65535');
  return n;
}
