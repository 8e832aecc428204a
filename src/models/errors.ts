// Errors of model resolution and download. Each message says what happened and what to do next,
// because the CLI prints it as is.
export class ModelError extends Error {
  constructor(message: string) {
    super(message);
    this.name = new.target.name;
  }
}

/** The spec matched nothing; `suggestions` are the nearest known names. */
export class ModelNotFoundError extends ModelError {
  constructor(
    message: string,
    readonly suggestions: string[] = [],
  ) {
    super(message);
  }
}

/** A retired alias: refused before any download. */
export class RetiredModelError extends ModelError {
  constructor(
    message: string,
    readonly replacement?: string,
  ) {
    super(message);
  }
}

/** A catalog entry rapid cannot run yet (e.g. a VLM before the vision runtime lands). */
export class PlannedModelError extends ModelError {}

/** HF_HUB_OFFLINE is set and the model (or file) is not in the cache. */
export class OfflineError extends ModelError {}

/** The hub refused or failed: auth, gating, missing repo/revision/file, server errors. */
export class HubError extends ModelError {
  constructor(
    message: string,
    readonly status?: number,
    readonly code?: string,
  ) {
    super(message);
  }
}

/** Downloaded bytes do not match the size or checksum the hub published. */
export class IntegrityError extends ModelError {}

/** A model directory whose config.json or safetensors files are invalid or disagree; the message names the field or tensor. */
export class InvalidCheckpointError extends ModelError {}
