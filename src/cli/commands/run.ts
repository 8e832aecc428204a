// `rapid run MODEL --prompt TEXT`: one request through the serving engine in-process, streamed to stdout.
import { DEFAULT_TEMPERATURE, ENGINE_DEFAULTS, withSamplingDefaults } from '../../engine/defaults.js';
import { parseSpeculativeMode, type SpeculativeMode } from '../../engine/speculative/speculator.js';
import type { Command } from 'commander';
import { resolveSamplingParams } from '../../engine/sampling-params.js';
import { openCommandModel } from '../open-model.js';
import { withWait } from '../wait-spinner.js';
import { runOneRequest, type OneRequestEngineOptions } from '../../app/one-request.js';
import { checkPrecision, DEVICE_HELP, kvCacheDtypeOption, parseDeviceOption, parseFloatOption, parseIntOption } from '../options.js';
import type { DeviceFlag } from '../../native/device-index.js';
import type { KvCacheDtype } from '../../native/types.js';
import { modelDevice } from '../../engine/model-device.js';
import { readFileSync } from 'node:fs';
import { grammarServiceFor } from '../../engine/grammar/grammar-service.js';
import { parseResponseFormat, type ResponseFormat } from '../../server/response-format.js';
import type { RequestGrammar } from '../../engine/grammar/request-grammar.js';
import { runWithImages } from './run-images.js';
import { DEFAULT_MODEL } from '../../models/default-model.js';

interface RunOptions {
  prompt?: string;
  system?: string;
  maxTokens: number;
  temperature?: number;
  topP?: number;
  topK?: number;
  minP?: number;
  seed?: number;
  stop?: string[];
  raw?: boolean;
  json?: boolean;
  threads?: number;
  precision: 'exact' | 'fast';
  device?: DeviceFlag;
  kvCacheDtype?: KvCacheDtype;
  schema?: string;
  /** false: max_tokens may cut constrained output mid-JSON (--no-budget-close). */
  budgetClose?: boolean;
  jsonObject?: boolean;
  image?: string[];
  speculative?: SpeculativeMode;
  stepTimeout?: number;
}

/** --schema FILE (a JSON Schema) or --json-object; checked before the model loads. */
function responseFormat(opts: RunOptions): ResponseFormat | null {
  if (opts.schema !== undefined && opts.jsonObject) throw new Error('pass either --schema or --json-object, not both');
  if (opts.jsonObject) return { type: 'json_object' };
  if (opts.schema === undefined) return null;
  let schema: unknown;
  try {
    schema = JSON.parse(readFileSync(opts.schema, 'utf8'));
  } catch (err) {
    throw new Error(`--schema ${opts.schema}: ${(err as Error).message}`);
  }
  return parseResponseFormat({ type: 'json_schema', json_schema: { name: 'schema', schema, strict: true } });
}

function collect(value: string, previous: string[] = []): string[] {
  return [...previous, value];
}

export function registerRun(program: Command): void {
  program
    .command('run')
    .description('Generate a reply to one prompt, streamed to stdout')
    .argument('[model]', `a model directory, a catalog alias (see \`rapid models\`) or an org/name repo; pulled on first use (default: ${DEFAULT_MODEL}, embedded)`, DEFAULT_MODEL)
    .option('-p, --prompt <text>', 'the user message (or the raw prompt with --raw); read from stdin when omitted')
    .option('-s, --system <text>', 'system message')
    .option('-n, --max-tokens <n>', 'maximum tokens to generate', parseIntOption('--max-tokens'), 256)
    .option('-t, --temperature <t>', `sampling temperature; 0 = greedy (default: the model's, else ${DEFAULT_TEMPERATURE})`, parseFloatOption('--temperature'))
    .option('--top-p <p>', 'nucleus sampling mass', parseFloatOption('--top-p'))
    .option('--top-k <k>', 'sample among the k most likely tokens (0 = off)', parseIntOption('--top-k'))
    .option('--min-p <p>', 'drop tokens below p x the top probability', parseFloatOption('--min-p'))
    .option('--seed <n>', 'random seed (same seed, same output)', parseIntOption('--seed'))
    .option('--stop <text>', 'stop string (repeatable)', collect)
    .option('--raw', 'send the prompt as is, without the chat template')
    .option('--json', 'print one JSON object: text, token_ids, finish_reason, usage, device, timings')
    .option('--threads <n>', 'CPU threads (default: all cores)', parseIntOption('--threads'))
    .option('--precision <mode>', 'exact (f32 activations) or fast (quantized weights with rounded activations: int8 on the CPU, bf16 on CUDA)', 'fast')
    .option('--device <device>', DEVICE_HELP, parseDeviceOption)
    .addOption(kvCacheDtypeOption())
    .option('--schema <file>', 'constrain the output to JSON valid against this JSON Schema file')
    .option('--json-object', 'constrain the output to a JSON object')
    .option('--no-budget-close', 'let --max-tokens cut constrained output mid-JSON (default: steer to a valid end in the tokens left)')
    .option('--image <file>', 'an image file to send with the prompt (repeatable; vision models)', collect)
    .option('--step-timeout <s>', 'a forward step or image encode running longer than this fails the request (a slow CPU may need more for large images)', parseIntOption('--step-timeout'), ENGINE_DEFAULTS.stepTimeoutS)
    .option('--speculative <mode>', 'speculative decoding: ngram (drafts from the prompt and output) or off (default: ngram on the CPU, off on CUDA)', parseSpeculativeMode)
    .action(async (spec: string, opts: RunOptions) => {
      checkPrecision(opts.precision);
      const images = opts.image ?? [];
      if (images.length > 0 && opts.raw) throw new Error('--image needs the chat template: drop --raw');
      const prompt = opts.prompt ?? (process.stdin.isTTY ? undefined : await readStdin());
      if (prompt === undefined || prompt.length === 0) throw new Error('no prompt: pass --prompt TEXT or pipe it on stdin');
      const format = responseFormat(opts);
      const { model, defaults } = await openCommandModel(spec, { threads: opts.threads, precision: opts.precision, device: opts.device, kvCacheDtype: opts.kvCacheDtype });
      try {
        if (model.info.embeddingOnly === true) {
          throw new Error(`${spec} is an embedding model (no language-model head): it cannot generate text; serve it with \`rapid serve\` and call POST /v1/embeddings`);
        }
        const params = resolveSamplingParams(
          withSamplingDefaults(
            {
              temperature: opts.temperature,
              topP: opts.topP,
              topK: opts.topK,
              minP: opts.minP,
              seed: opts.seed,
              maxTokens: opts.maxTokens,
              stop: format ? [] : opts.stop, // a stop string would cut a constrained object
            },
            defaults,
          ),
          { maxTokens: 256 },
        );
        const engineOptions: OneRequestEngineOptions = { speculative: opts.speculative, stepTimeoutMs: (opts.stepTimeout ?? ENGINE_DEFAULTS.stepTimeoutS) * 1000 };
        let grammar: RequestGrammar | undefined;
        // With max_tokens: a budget below the schema's shortest output is refused, as the server does.
        if (format) {
          const service = grammarServiceFor(model.text, model.info.vocabSize);
          grammar = await withWait('compiling the schema', () => service.matcher(format, { maxTokens: params.maxTokens, budgetClose: opts.budgetClose !== false }));
        }
        if (images.length > 0) {
          await runWithImages(model, { prompt, system: opts.system, images, params, grammar, json: opts.json ?? false, spec, engine: engineOptions });
          return;
        }
        const promptIds = model.encodePrompt({ prompt, system: opts.system, raw: opts.raw ?? false });
        const { done, timings: t } = await runOneRequest(model, { promptIds, params, grammar }, opts.json ? undefined : (text) => process.stdout.write(text), engineOptions);
        if (opts.json) {
          process.stdout.write(
            `${JSON.stringify({
              text: done.text,
              token_ids: done.tokenIds,
              finish_reason: done.finishReason,
              usage: { prompt_tokens: done.usage.promptTokens, completion_tokens: done.usage.completionTokens, total_tokens: done.usage.totalTokens },
              device: modelDevice(model.info),
              timings: {
                prefill_ms: round(t.prefillMs),
                decode_ms: round(t.decodeMs),
                prefill_tokens_per_second: round(t.prefillTokensPerSecond),
                decode_tokens_per_second: round(t.decodeTokensPerSecond),
              },
            })}\n`,
          );
        } else {
          process.stdout.write('\n');
          if (process.stderr.isTTY) {
            process.stderr.write(
              `[${done.usage.promptTokens} prompt tokens at ${t.prefillTokensPerSecond.toFixed(1)} tok/s, ` +
                `${done.usage.completionTokens} generated at ${t.decodeTokensPerSecond.toFixed(1)} tok/s, finish: ${done.finishReason}]\n`,
            );
          }
        }
      } finally {
        model.close();
      }
    });
}

function round(x: number): number {
  return Math.round(x * 100) / 100;
}

async function readStdin(): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const c of process.stdin) chunks.push(c as Buffer);
  return Buffer.concat(chunks).toString('utf8').trimEnd();
}
