// Seeded request sets: prompt and output lengths drawn from their distributions, free text,
// structured output (--schema), vision (--images) or a mix. The requests of a (level, run) depend
// only on the seed, so two servers benched with the same flags get the same requests, while levels
// and runs differ from each other (a prefix cache must not make later levels look faster).
import type { BenchImage } from './images.js';
import { sampleLength, type LengthDistribution } from './length-distribution.js';
import { createRng, mixSeed, randInt, type Rng } from './rng.js';

export type WorkloadKind = 'text' | 'schema' | 'vision' | 'extraction';

export type ContentPart = { type: 'text'; text: string } | { type: 'image_url'; image_url: { url: string } };

export interface BenchMessage {
  role: 'system' | 'user';
  content: string | ContentPart[];
}

export interface BenchRequest {
  /** Position in the level's request list. */
  index: number;
  kind: WorkloadKind;
  messages: BenchMessage[];
  maxTokens: number;
  /** Words of filler text in the prompt (the length the distribution asked for). */
  promptWords: number;
  /** The per-request sampling seed sent to the server. */
  seed: number;
  /** The name of the image sent (vision requests). */
  image?: string;
  /** top_p sent with the request (absent: not sent). */
  topP?: number;
}

export interface WorkloadOptions {
  /** The kinds requests are drawn from, with equal weight (one kind: every request is that kind). */
  kinds: WorkloadKind[];
  promptLength: LengthDistribution;
  outputLength: LengthDistribution;
  /** Upper bound on every request's max_tokens. */
  maxTokens: number;
  seed: number;
  schema?: Record<string, unknown>;
  images?: BenchImage[];
  /** top_p of every request (absent: not sent). */
  topP?: number;
}

const WORDS = (
  'river stone cloud market engine yellow quiet seven garden paper north silver window bridge forest ' +
  'candle harbor mountain letter orange winter summer lantern button castle meadow pencil rocket ocean ' +
  'thunder violet marble planet signal valley whisper copper feather island journey kitchen ladder ' +
  'mirror needle pillow rabbit saddle teacup umbrella village wagon zebra anchor basket cactus dolphin ' +
  'eagle fountain glacier hammer igloo jacket kettle lemon magnet nectar orchard puzzle quartz ribbon ' +
  'spiral tunnel violin walnut yarn compass desert ember falcon granite horizon ivory jungle kite'
).split(' ');

function filler(rng: Rng, words: number): string {
  const out: string[] = [];
  for (let i = 0; i < words; i++) out.push(WORDS[randInt(rng, 0, WORDS.length - 1)]!);
  return out.join(' ');
}

/** About `words` words as numbered records of 8 to 16 words each, and 3 to 5 record numbers to copy. */
function recordDocument(rng: Rng, words: number): { document: string; asked: number[] } {
  const lines: string[] = [];
  for (let n = 0; n < words; ) {
    const len = randInt(rng, 8, 16);
    lines.push(`Record ${lines.length + 1}: ${filler(rng, len)}.`);
    n += len + 2;
  }
  const asked = new Set<number>();
  const want = Math.min(lines.length, randInt(rng, 3, 5));
  while (asked.size < want) asked.add(randInt(rng, 1, lines.length));
  return { document: lines.join('\n'), asked: [...asked].sort((a, b) => a - b) };
}

export function validateWorkload(o: WorkloadOptions): void {
  if (o.kinds.length === 0) throw new Error('the workload has no request kinds');
  if (o.kinds.includes('schema') && !o.schema) throw new Error('a schema workload needs --schema FILE');
  if (o.kinds.includes('vision') && (!o.images || o.images.length === 0)) throw new Error('a vision workload needs --images DIR');
  if (!Number.isInteger(o.maxTokens) || o.maxTokens < 1) throw new Error('--max-tokens must be at least 1');
}

/** The `count` requests of concurrency level `level`, run `run` (1-based). */
export function generateRequests(o: WorkloadOptions, count: number, level: number, run: number): BenchRequest[] {
  validateWorkload(o);
  const rng = createRng(mixSeed(o.seed, level, run));
  const requests: BenchRequest[] = [];
  for (let index = 0; index < count; index++) {
    const kind = o.kinds.length === 1 ? o.kinds[0]! : o.kinds[randInt(rng, 0, o.kinds.length - 1)]!;
    const promptWords = sampleLength(o.promptLength, rng);
    const maxTokens = Math.min(o.maxTokens, sampleLength(o.outputLength, rng));
    const seed = Math.floor(rng() * 2 ** 31);
    const text = filler(rng, promptWords);
    const base = { index, kind, maxTokens, promptWords, seed, ...(o.topP !== undefined ? { topP: o.topP } : {}) };
    switch (kind) {
      case 'text':
        requests.push({ ...base, messages: [{ role: 'user', content: `Continue this text in your own words: ${text}` }] });
        break;
      case 'schema':
        requests.push({
          ...base,
          messages: [
            { role: 'system', content: `Reply with one JSON object that satisfies this JSON Schema: ${JSON.stringify(o.schema)}` },
            { role: 'user', content: `Fill in the object using these words: ${text}` },
          ],
        });
        break;
      case 'extraction': {
        // A document of numbered records; the answer copies some of them verbatim, so a model that
        // follows the instruction repeats spans of its prompt (what n-gram speculation drafts from).
        const { document, asked } = recordDocument(rng, promptWords);
        requests.push({
          ...base,
          messages: [
            { role: 'system', content: 'You copy text exactly. Never paraphrase.' },
            { role: 'user', content: `Document:\n${document}\n\nCopy records ${asked.join(', ')} exactly as written above, one per line, with their numbers.` },
          ],
        });
        break;
      }
      case 'vision': {
        const image = o.images![randInt(rng, 0, o.images!.length - 1)]!;
        requests.push({
          ...base,
          image: image.name,
          messages: [
            {
              role: 'user',
              content: [
                { type: 'image_url', image_url: { url: image.dataUri } },
                { type: 'text', text: `Describe this image. Context: ${text}` },
              ],
            },
          ],
        });
        break;
      }
    }
  }
  return requests;
}
