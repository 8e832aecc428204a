// The named limits a request body is checked against before any heavy work, in one place: each
// refusal is a 400 that names the limit, so a client knows what to change.

export const REQUEST_LIMITS = {
  /** JSON nesting (arrays and objects) of a request body; deeper bodies are refused before parsing. */
  maxJsonDepth: 128,
  /** JSON objects in a request body (4096 messages with their parts and tools stay far below). */
  maxJsonObjects: 32_768,
  /** Messages of one chat request. */
  maxMessages: 4096,
  /** Content parts (text and image) of one chat request, over all its messages. */
  maxContentParts: 8192,
  /** Wall time one prompt may take to render (chat template) and tokenize on a worker. */
  promptTimeMs: 5_000,
} as const;
