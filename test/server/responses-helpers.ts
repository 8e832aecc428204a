// A real server over a scripted native model for /v1/responses client tests: the model writes,
// byte by byte through the real Engine, the script named by the last user or tool message of its
// prompt (byteModel renders "role: content" lines). Script "echo" writes the prompt back.
import { Engine } from '../../src/engine/engine.js';
import type { GrammarProvider } from '../../src/engine/grammar/grammar-service.js';
import { createServer, type RapidServer, type ServerOptions } from '../../src/server/server.js';
import type { ServedVision } from '../../src/server/served-model.js';
import { byteTextStream } from '../engine/helpers.js';
import { SCRIPT_EOS, ScriptedModel } from './scripted-model.js';
import { byteModel } from './helpers.js';


export interface ScriptedServer {
  server: RapidServer;
  url: string;
  logs: string[];
}

/** A hermes-format (Qwen-style) tool-capable server; `reasoning`: a thinking model. */
export async function startScriptedServer(
  scripts: Record<string, string>,
  opts: { reasoning?: boolean; grammar?: GrammarProvider; vision?: ServedVision; server?: Partial<ServerOptions> } = {},
): Promise<ScriptedServer> {
  const engine = new Engine({ model: new ScriptedModel(scripts), newTextStream: () => byteTextStream(), stopTokenIds: [SCRIPT_EOS], enablePrefixCache: false });
  const logs: string[] = [];
  const server = createServer({
    engine,
    model: { ...byteModel(engine.contextLength), toolFormat: 'hermes', reasoning: opts.reasoning ?? false, ...(opts.vision ? { vision: opts.vision } : {}) },
    grammar: opts.grammar,
    log: (l) => logs.push(l),
    ...opts.server,
  });
  const { url } = await server.listen(0, '127.0.0.1');
  return { server, url, logs };
}

/** The SSE events of a raw streamed response, in order. */
export function sseEvents(text: string): { event: string; data: Record<string, unknown> }[] {
  return text
    .split('\n\n')
    .filter((b) => b.trim() && !b.startsWith(':'))
    .map((b) => {
      const event = /^event: (.*)$/m.exec(b)?.[1] ?? '';
      const data = JSON.parse(/^data: (.*)$/m.exec(b)![1]!) as Record<string, unknown>;
      return { event, data };
    });
}
