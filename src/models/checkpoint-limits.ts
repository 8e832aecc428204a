// The sane ranges a checkpoint's config.json and tensors must fall in before native code sees them.
// Generous on purpose: the largest public models fit with room; anything beyond is a corrupt file.
export const CHECKPOINT_LIMITS = {
  maxVocab: 1 << 22, // 4M tokens (largest public vocabularies are ~262k)
  maxHidden: 1 << 16,
  maxIntermediate: 1 << 20,
  maxLayers: 1024,
  maxHeads: 1024,
  maxHeadDim: 1024,
  maxPositions: 1 << 27, // 134M tokens of context
  maxExperts: 4096,
  maxRopeTheta: 1e12,
  maxRopeFactor: 1e4,
  maxSoftcap: 1e6,
  maxEps: 1, // norm epsilons are tiny positives; 1 or more is a corrupt value
  maxPatchSize: 1024,
  maxImageSize: 1 << 16,
  maxMergeSize: 64,
  maxChannels: 16,
  maxHeaderBytes: 100 * 1024 * 1024, // safetensors JSON header
  maxConfigDepth: 64, // config.json nests a few levels; the native JSON parser stops at 512
  quantBits: [2, 3, 4, 5, 6, 8],
  quantGroupSizes: [32, 64, 128],
  quantModes: ['affine'],
} as const;
