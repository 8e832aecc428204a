// Public surface of image input: decode, fetch, per-family preprocessing, prompt expansion, positions.

export { decodeImage, DEFAULT_MAX_IMAGE_PIXELS, type DecodedImage, type DecodeImageOptions } from './decode-image.js';
export { fetchImageBytes, decodeDataUri, DEFAULT_MAX_IMAGE_BYTES, type FetchImageOptions } from './fetch-image.js';
export { imageHash } from './image-hash.js';
export { blockedAddressKind } from './ip-policy.js';
export { decodePositions, mropePositions, slicePositions, type MropeImageSpan, type MropePositions } from './mrope-positions.js';
export { pilResize, type ResampleFilter } from './pil-resample.js';
export { prepareWithSpec, type PreprocessSpec } from './prepare-image.js';
export { PreprocessPool, preprocessPool, type PreprocessPoolOptions, type PreprocessPoolStats } from './preprocess-pool.js';
export {
  assertImagesAllowed,
  type PreparedImage,
  type PrepareImageOptions,
  type VisionFamily,
  VisionProcessor,
  type VisionPrompt,
  type VisionPromptImage,
} from './processor.js';
