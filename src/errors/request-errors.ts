// Errors every layer raises and the server maps: InvalidRequestError to a 4xx with its message,
// StepError when a step fails the requests in it, EngineUnavailableError as a 503. Below engine/ and vision/, so both can throw them.
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

/** The engine (or a preprocessing pool before it) cannot take the request now (queue full,
 *  draining, unhealthy): retry later. */
export class EngineUnavailableError extends Error {
  constructor(
    message: string,
    readonly reason: 'overloaded' | 'shutting_down' | 'unhealthy',
    readonly retryAfterSeconds = 1,
  ) {
    super(message);
    this.name = 'EngineUnavailableError';
  }
}
