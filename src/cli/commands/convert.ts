// `rapid convert SRC DST --quantize 4|8 --group-size 64`: write an MLX-format quantized checkpoint.
import type { Command } from 'commander';
import { existsSync } from 'node:fs';
import { loadNative } from '../../native/binding.js';
import { parseIntOption } from '../options.js';

const BITS = [4, 8];
const GROUPS = [32, 64, 128];

export function registerConvert(program: Command): void {
  program
    .command('convert')
    .description('Quantize a bf16/f16/f32 checkpoint into the MLX affine format (as mlx-lm does)')
    .argument('<src>', 'model directory with config.json and safetensors')
    .argument('<dst>', 'output directory (created; must not exist)')
    .requiredOption('-q, --quantize <bits>', `bits per weight (${BITS.join(' or ')})`, parseIntOption('--quantize'))
    .option('-g, --group-size <n>', `elements per quantization group (${GROUPS.join(', ')})`, parseIntOption('--group-size'), 64)
    .action((src: string, dst: string, opts: { quantize: number; groupSize: number }) => {
      if (!BITS.includes(opts.quantize)) throw new Error(`--quantize must be one of ${BITS.join(', ')}, got ${opts.quantize}`);
      if (!GROUPS.includes(opts.groupSize)) throw new Error(`--group-size must be one of ${GROUPS.join(', ')}, got ${opts.groupSize}`);
      if (!existsSync(src)) throw new Error(`source model directory not found: ${src}`);
      if (existsSync(dst)) throw new Error(`destination already exists: ${dst} (choose a new directory)`);
      const started = performance.now();
      loadNative().addon.convert(src, dst, { bits: opts.quantize, groupSize: opts.groupSize });
      const secs = ((performance.now() - started) / 1000).toFixed(1);
      process.stdout.write(`wrote ${dst} (affine ${opts.quantize}-bit, group ${opts.groupSize}) in ${secs}s\n`);
    });
}
