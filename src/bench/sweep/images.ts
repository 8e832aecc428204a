// `--images DIR`: the directory's images read once and sent as data: URIs in image_url content parts.
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { extname, join } from 'node:path';

export interface BenchImage {
  name: string;
  /** data:<mime>;base64,<bytes> */
  dataUri: string;
  bytes: number;
}

const MIME: Record<string, string> = {
  '.png': 'image/png',
  '.jpg': 'image/jpeg',
  '.jpeg': 'image/jpeg',
  '.webp': 'image/webp',
  '.gif': 'image/gif',
};

/** Images of DIR (not recursive), sorted by name so a seed picks the same ones everywhere. */
export function loadImages(dir: string, maxBytes = 20 * 1024 * 1024): BenchImage[] {
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch (err) {
    throw new Error(`--images ${dir}: ${(err as Error).message}`);
  }
  const images: BenchImage[] = [];
  for (const name of names.sort()) {
    const mime = MIME[extname(name).toLowerCase()];
    if (!mime) continue;
    const path = join(dir, name);
    const st = statSync(path);
    if (!st.isFile()) continue;
    if (st.size > maxBytes) throw new Error(`--images: ${path} is larger than ${maxBytes} bytes`);
    const buf = readFileSync(path);
    images.push({ name, dataUri: `data:${mime};base64,${buf.toString('base64')}`, bytes: buf.length });
  }
  if (images.length === 0) throw new Error(`--images ${dir}: no .png, .jpg, .jpeg, .webp or .gif files`);
  return images;
}
