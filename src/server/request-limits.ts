// The named limits a request body is checked against before any heavy work, in one place: each
// refusal is a 400 that names the limit, so a client knows what to change.

export const REQUEST_LIMITS = {
  /** JSON nesting (arrays and objects) of a request body; deeper bodies are refused before parsing. */
  maxJsonDepth: 128,
  /** JSON objects in a request body (4096 messages with their parts and tools stay far below). */
  maxJsonObjects: 32_768,
  /** JSON values (array elements, object members) in a request body; a prompt of token ids may
   * have up to the model's context length of them, so the server takes the larger of the two. */
  maxJsonValues: 262_144,
  /** Messages of one chat request. */
  maxMessages: 4096,
  /** Content parts (text and image) of one chat request, over all its messages. */
  maxContentParts: 8192,
  /** Choices (`n`) of one chat or text completion: each is its own request in the batch. */
  maxChoices: 16,
  /** Wall time one prompt may take to render (chat template) and tokenize on a worker. */
  promptTimeMs: 5_000,
} as const;
