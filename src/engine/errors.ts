// Typed errors the engine raises; the server maps InvalidRequestError to a 4xx with its message.
export class InvalidRequestError extends Error {
  constructor(
    message: string,
    readonly param?: string,
  ) {
    super(message);
    this.name = 'InvalidRequestError';
  }
}

/** A failure inside a step (forward, sampler, detokenizer): terminal for the requests in it. */
export class StepError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'StepError';
  }
}
