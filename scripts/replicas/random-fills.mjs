// Position-seeded random fills for replica tensors: the bench's own (dist/bench/random-checkpoint.js, so
// one generator of random weights serves benches and replicas) plus the two kinds replicas add.
const dist = new URL('../../dist/bench/', import.meta.url);

async function load(file) {
  try {
    return await import(new URL(file, dist).href);
  } catch (err) {
    throw new Error(`replicas use dist/bench/${file}: run \`npm run compile\` first (${err.message})`);
  }
}

const checkpoint = await load('random-checkpoint.js');
const writer = await load('safetensors-writer.js');

export const { bf16, fillRandomBits, fillScales, hash32 } = checkpoint;
export const { tensorBytes, writeSafetensors } = writer;

/** Every bf16 element set to `bits` (e.g. a norm weight of 1, or 0 for Gemma's 1 + w). */
export function fillConst(bits) {
  return (chunk) => new Uint16Array(chunk.buffer, chunk.byteOffset, chunk.length >>> 1).fill(bits);
}

/** bf16 uniform in [-amp, amp], addressed by element index so any chunking gives the same bytes. */
export function fillUniform(seed, amp) {
  return (chunk, byteOffset) => {
    const out = new Uint16Array(chunk.buffer, chunk.byteOffset, chunk.length >>> 1);
    const first = byteOffset >>> 1;
    for (let i = 0; i < out.length; i++) out[i] = bf16((hash32(seed ^ hash32(first + i)) / 2 ** 32) * 2 * amp - amp);
  };
}
