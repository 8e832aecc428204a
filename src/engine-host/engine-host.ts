// One model's engine in its own process, as the HTTP side sees it: the text side (tokenizer,
// template, image preprocessing) opened here, the weights, engine and grammar in a supervised child,
// and the RemoteEngine and RemoteGrammar the server talks to. `rapid serve --engine-process child`.
import type { NativeModelInfo } from '../native/types.js';
import { openTextSide, type TextSide } from '../engine/text-model.js';
import { VisionProcessor } from '../vision/index.js';
import type { ChildInit, ChildMessage } from './protocol.js';
import { RemoteEngine } from './remote-engine.js';
import { RemoteGrammar } from './remote-grammar.js';
import { EngineSupervisor } from './supervisor.js';

/** The model as the HTTP process holds it: everything but the weights; `info` is the child's. */
export interface HostModel extends TextSide {
  info: NativeModelInfo;
  vision: VisionProcessor | null;
}

export interface EngineHost {
  model: HostModel;
  engine: RemoteEngine;
  grammar: RemoteGrammar;
  supervisor: EngineSupervisor;
}

/** Opens the text side, starts the child and waits until it has loaded the model (its errors reject). */
export async function startEngineHost(dir: string, init: Omit<ChildInit, 'dir'>, log: (line: string) => void, env: Readonly<Record<string, string>> = {}): Promise<EngineHost> {
  const side = openTextSide(dir);
  let engine: RemoteEngine | null = null;
  let grammar: RemoteGrammar | null = null;
  const supervisor = new EngineSupervisor(
    { ...init, dir: side.dir },
    {
      message: (m: ChildMessage) => {
        engine?.onMessage(m);
        grammar?.onMessage(m);
      },
      down: (reason) => {
        engine?.onDown(reason);
        grammar?.onDown(reason);
      },
      up: (_info, snapshot) => engine?.onUp(snapshot),
    },
    log,
    env,
  );
  const { info, snapshot } = await supervisor.start();
  engine = new RemoteEngine(supervisor, info.contextLength, snapshot);
  grammar = new RemoteGrammar(supervisor);
  let vision: VisionProcessor | null;
  try {
    vision = info.vision !== undefined ? VisionProcessor.load(side.dir, side.text) : null;
  } catch (err) {
    await supervisor.shutdown(0);
    throw err;
  }
  return { model: { ...side, info, vision }, engine, grammar, supervisor };
}
