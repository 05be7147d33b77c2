/** Longest `last_error` kept, in characters: enough for a message and a deep stack. */
export const MAX_ERROR_LENGTH = 8_000;

/**
 * Text stored as `last_error` for a failure: the message, then the stack when there is one,
 * bounded to `maxLength` characters. Non-Error throw values (strings, objects) are described.
 */
export function errorText(error: unknown, maxLength = MAX_ERROR_LENGTH): string {
  let text: string;
  if (error instanceof Error) {
    // "Name: message", or the message alone when it already starts with the name
    // (JobDeadlineExceeded, SPEC §1.10).
    const head = error.message.startsWith(`${error.name}: `)
      ? error.message
      : `${error.name}: ${error.message}`;
    // A stack normally repeats the head as its first line; keep the head once.
    const stack = error.stack ?? '';
    text = stack.startsWith(head) ? stack : stack ? `${head}\n${stack}` : head;
  } else if (typeof error === 'string') {
    text = error;
  } else {
    let json: string | undefined;
    try {
      json = JSON.stringify(error);
    } catch {
      json = undefined;
    }
    text = `Non-Error thrown: ${json ?? String(error)}`;
  }
  text = text.replaceAll('\u0000', '\\u0000');
  return text.length > maxLength ? `${text.slice(0, maxLength - 15)}… [truncated]` : text;
}
