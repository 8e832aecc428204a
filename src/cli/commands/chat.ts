// `rapid chat [MODEL | --url URL]`: an interactive conversation in the terminal (ink), with a model
// loaded in-process like `rapid run` loads it, or with an OpenAI-compatible server.
import type { Command } from 'commander';
import type { ChatBackend } from '../../chat/chat-backend.js';
import { ChatSession } from '../../chat/chat-session.js';
import { httpBackend } from '../../chat/http-backend.js';
import { localBackend } from '../../chat/local-backend.js';
import { DEFAULT_MODEL } from '../../models/default-model.js';
import type { DeviceFlag } from '../../native/device-index.js';
import type { KvCacheDtype } from '../../native/types.js';
import { openCommandModel } from '../open-model.js';
import { checkPrecision, DEVICE_HELP, kvCacheDtypeOption, parseDeviceOption, parseFloatOption, parseIntOption } from '../options.js';

interface ChatOptions {
  url?: string;
  model?: string;
  apiKey?: string;
  system?: string;
  maxTokens: number;
  temperature?: number;
  threads?: number;
  precision: 'exact' | 'fast';
  device?: DeviceFlag;
  kvCacheDtype?: KvCacheDtype;
}

/** Loads the ink UI as interactive. ink (is-in-ci, read once when first imported) draws only the final
 *  frame where CI or CONTINUOUS_INTEGRATION is set; a chat on a terminal is interactive wherever it runs. */
async function loadInteractiveUi(): Promise<typeof import('../../chat/ui/render-chat.js')> {
  const keys = ['CI', 'CONTINUOUS_INTEGRATION'] as const;
  const saved = keys.map((k) => process.env[k]);
  for (const k of keys) delete process.env[k];
  try {
    return await import('../../chat/ui/render-chat.js');
  } finally {
    keys.forEach((k, i) => {
      if (saved[i] !== undefined) process.env[k] = saved[i];
    });
  }
}

async function openBackend(spec: string | undefined, opts: ChatOptions): Promise<ChatBackend> {
  if (opts.url !== undefined) {
    if (spec !== undefined) throw new Error('pass either a MODEL or --url, not both');
    return httpBackend(opts.url, { model: opts.model, apiKey: opts.apiKey ?? process.env.RAPID_API_KEY });
  }
  const name = spec ?? DEFAULT_MODEL;
  const { model, defaults } = await openCommandModel(name, { threads: opts.threads, precision: opts.precision, device: opts.device, kvCacheDtype: opts.kvCacheDtype });
  return localBackend(name, model, defaults);
}

export function registerChat(program: Command): void {
  program
    .command('chat')
    .description('Chat with a model in the terminal: multi-turn, streaming, images and JSON schemas')
    .argument('[model]', `a model directory, a catalog alias or an org/name repo, loaded in-process (default: ${DEFAULT_MODEL}, embedded)`)
    .option('--url <url>', 'talk to this OpenAI-compatible server instead (rapid serve or any other; root, /v1 or the endpoint)')
    .option('--model <name>', 'with --url: the model name to send (default: the first of its /v1/models)')
    .option('--api-key <key>', 'with --url: sent as Authorization: Bearer <key> (default: $RAPID_API_KEY)')
    .option('-s, --system <text>', 'system message (/system changes it)')
    .option('-n, --max-tokens <n>', 'maximum tokens per reply', parseIntOption('--max-tokens'), 1024)
    .option('-t, --temperature <t>', "sampling temperature; 0 = greedy (default: the model's)", parseFloatOption('--temperature'))
    .option('--threads <n>', 'in-process model: CPU threads (default: all cores)', parseIntOption('--threads'))
    .option('--precision <mode>', 'in-process model: exact or fast', 'fast')
    .option('--device <device>', `in-process model: ${DEVICE_HELP}`, parseDeviceOption)
    .addOption(kvCacheDtypeOption('in-process model: '))
    .action(async (spec: string | undefined, opts: ChatOptions) => {
      checkPrecision(opts.precision);
      // ink reads keys in raw mode: a pipe has none (rapid run is the command for scripts).
      if (!process.stdin.isTTY) throw new Error('rapid chat needs a terminal; for a prompt on a pipe use `rapid run`');
      const backend = await openBackend(spec, opts);
      const session = new ChatSession(backend, opts.system);
      const where = opts.url !== undefined ? ` at ${opts.url}` : '';
      const context = backend.contextLength ? `, context ${backend.contextLength} tokens` : '';
      try {
        const { renderChat } = await loadInteractiveUi();
        await renderChat({ session, maxTokens: opts.maxTokens, temperature: opts.temperature, greeting: `rapid chat · ${backend.model}${where}${context} · /help for commands` });
      } finally {
        await backend.close();
      }
    });
}
