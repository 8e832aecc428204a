// Messages between the preprocessing pool and its worker threads (structured-clone data only).

import type { DecodedImage } from './decode-image.js';
import type { PreparedImage, PrepareImageOptions, PreprocessSpec } from './prepare-image.js';

export interface PreprocessRequest {
  id: number;
  spec: PreprocessSpec;
  image: DecodedImage;
  options: PrepareImageOptions;
}

export type PreprocessReply =
  | { id: number; ok: true; result: PreparedImage }
  | { id: number; ok: false; error: { invalid: boolean; message: string; param?: string } };
