// The image parts of a chat request ({type: "image_url", image_url: {url, detail?}}), loaded before
// the request is validated and encoded: checked for shape and count first (nothing is fetched or
// decoded for a request that is refused anyway), then fetched/decoded/preprocessed one by one. Any
// problem is a 400 that names the part and says what to fix; other requests are unaffected.
import { InvalidRequestError } from '../errors/request-errors.js';
import { badRequest } from './http-errors.js';
import type { ImageDetail, LoadedImage, ServedModel } from './served-model.js';
import { isObject } from '../engine/is-object.js';

/** Loaded images by their content part object (validate.ts looks them up as it walks the parts). */
export type RequestImages = ReadonlyMap<object, LoadedImage>;

const DETAILS = new Set(['auto', 'low', 'high']);
/** Content part types that carry an image (only image_url is accepted; the others get a hint). */
export const IMAGE_TYPES: ReadonlySet<string> = new Set(['image_url', 'input_image', 'image']);

interface ImagePart {
  part: object;
  url: string;
  detail: ImageDetail;
  where: string;
}

/** The image parts of body.messages, in prompt order (malformed parts are left to validate.ts). */
function imageParts(body: unknown): ImagePart[] {
  if (!isObject(body) || !Array.isArray(body.messages)) return [];
  const out: ImagePart[] = [];
  body.messages.forEach((m: unknown, i) => {
    if (!isObject(m) || !Array.isArray(m.content)) return;
    m.content.forEach((part: unknown, j) => {
      if (!isObject(part) || typeof part.type !== 'string' || !IMAGE_TYPES.has(part.type)) return;
      const where = `messages[${i}].content[${j}]`;
      if (part.type !== 'image_url') {
        throw badRequest(`${where}: use {"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}} for images`, `${where}.type`, 'invalid_value');
      }
      const iu = part.image_url;
      const url = typeof iu === 'string' ? iu : isObject(iu) ? iu.url : undefined;
      if (typeof url !== 'string' || url.length === 0) {
        throw badRequest(`${where}.image_url.url must be a data: URI or an http(s) URL`, `${where}.image_url.url`, 'invalid_type');
      }
      const detail = isObject(iu) && iu.detail !== undefined && iu.detail !== null ? iu.detail : 'auto';
      if (typeof detail !== 'string' || !DETAILS.has(detail)) {
        throw badRequest(`${where}.image_url.detail must be "auto", "low" or "high"`, `${where}.image_url.detail`, 'invalid_value');
      }
      out.push({ part, url, detail: detail as ImageDetail, where });
    });
  });
  return out;
}

/** Loads every image of a chat request; undefined when it has none. Throws HttpError 400. */
export async function loadRequestImages(body: unknown, model: ServedModel): Promise<RequestImages | undefined> {
  const parts = imageParts(body);
  if (parts.length === 0) return undefined;
  const vision = model.vision;
  if (vision === undefined) {
    throw badRequest(`the model '${model.id}' does not accept images (it has no vision tower); send text only or serve a vision model`, parts[0]!.where, 'unsupported');
  }
  if (parts.length > vision.maxImagesPerRequest) {
    throw badRequest(
      `this request has ${parts.length} images; the server accepts at most ${vision.maxImagesPerRequest} per request`,
      'messages',
      'too_many_images',
    );
  }
  for (const p of parts) {
    if (/^https?:/i.test(p.url) && !vision.allowRemote) {
      throw badRequest(
        `${p.where}: image URLs are turned off on this server; send the image inline as a data: URI (or start the server with --allow-remote-images)`,
        `${p.where}.image_url.url`,
        'remote_images_disabled',
      );
    }
  }
  const loaded = new Map<object, LoadedImage>();
  for (const p of parts) {
    try {
      loaded.set(p.part, await vision.loadImage(p.url, p.detail));
    } catch (err) {
      if (err instanceof InvalidRequestError) throw badRequest(`${p.where}: ${err.message}`, `${p.where}.image_url`, 'invalid_image');
      throw err;
    }
  }
  return loaded;
}
