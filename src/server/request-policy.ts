// How lenient one server is with request fields: OpenAI fields without effect here are accepted
// and logged, fields OpenAI does not define too (vLLM's behaviour) unless --strict-requests refuses
// them. Each field name is logged once per server, so a client sending it on every request does
// not flood the log.

/** Field names remembered as logged; names are the client's, so the set is bounded. */
const MAX_LOGGED_FIELDS = 256;

export type FieldNote = 'ignored' | 'unrecognized';

export interface RequestPolicy {
  /** --strict-requests: a field OpenAI does not define is a 400 "Unrecognized request argument". */
  readonly strict: boolean;
  /** Says once per server that a field was accepted without effect (`why` says why, for the log). */
  note(field: string, kind: FieldNote, why?: string): void;
}

/** A lenient policy that logs nothing: the default for callers that pass none. */
export const SILENT_POLICY: RequestPolicy = { strict: false, note: () => undefined };

export function requestPolicy(options: { strict?: boolean; log?: (line: string) => void }): RequestPolicy {
  const seen = new Set<string>();
  const log = options.log ?? (() => undefined);
  return {
    strict: options.strict ?? false,
    note(field, kind, why) {
      const key = `${kind}:${field}`;
      if (seen.has(key) || seen.size >= MAX_LOGGED_FIELDS) return;
      seen.add(key);
      const what = kind === 'ignored' ? 'accepted and ignored' : 'not an OpenAI field: accepted and ignored';
      log(`request field "${field}": ${what}${why ? ` (${why})` : ''}; logged once`);
    },
  };
}
