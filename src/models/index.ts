// src/models: everything a model is before the engine sees it (aliases, HF cache, downloads).
export { loadCatalog, findAlias, findRepo, type CatalogEntry, type ModelStatus, type Modality, type RecommendedSampling } from './catalog.js';
export { ModelError, ModelNotFoundError, RetiredModelError, PlannedModelError, OfflineError, HubError, IntegrityError, InvalidCheckpointError } from './errors.js';
export { validateCheckpoint } from './validate-checkpoint.js';
export { hubEnv, hubCacheDir, rapidConfigDir, type Env, type HubEnv } from './hub-env.js';
export { resolveSpec, type ModelRef } from './resolve-spec.js';
export { resolveModel, resolveModelDetailed, plannedMessage, type ResolveModelOptions, type ResolvedModel } from './resolve-model.js';
export { pullRepo, type PullEvent, type PullOptions, type PullResult } from './pull.js';
export { listModels, type ListedModel, type ModelListing } from './list-models.js';
export { removeModel, type RemovedModel } from './remove-model.js';
export { modelInfo, inspectModelDir, type ModelInfo } from './model-info.js';
export { listCachedRepos, readCachedRepo, type CachedRepo } from './hf-cache.js';
export { createProgressPrinter } from './progress-printer.js';
export { formatBytes } from './format-bytes.js';
