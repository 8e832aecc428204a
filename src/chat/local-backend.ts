// `rapid chat MODEL`: the conversation runs on an engine in this process, built like `rapid run`
// builds it (chat template, images through the vision processor, schemas through the grammar service).
import { withSamplingDefaults } from '../engine/defaults.js';
import { readFileSync } from 'node:fs';
import { createTextEngine } from '../engine/text-engine.js';
import { grammarServiceFor } from '../engine/grammar/grammar-service.js';
import { parseResponseFormat, type ResponseFormat } from '../server/response-format.js';
import { imageChatPrompt, imageUserMessage } from '../engine/image-prompt.js';
import type { MultimodalInput } from '../engine/multimodal.js';
import { resolveSamplingParams } from '../engine/sampling-params.js';
import type { TextModel } from '../engine/text-model.js';
import type { RecommendedSampling } from '../models/catalog.js';
import type { ChatMessage } from '../template/chat-template.js';
import { decodeImage, type PreparedImage } from '../vision/index.js';
import type { ChatBackend, ChatTurn, ReplyEvent, ReplyOptions } from './chat-backend.js';

export function localBackend(name: string, model: TextModel, defaults: RecommendedSampling): ChatBackend {
  const engine = createTextEngine(model, { maxNumSeqs: 1 });
  const grammar = grammarServiceFor(model.text, model.info.vocabSize);
  // Images are prepared once per file: every turn re-sends the whole conversation.
  const prepared = new Map<string, PreparedImage>();

  const prepare = async (file: string): Promise<PreparedImage> => {
    const hit = prepared.get(file);
    if (hit) return hit;
    if (model.vision === null) throw new Error(`${name} does not accept images (no vision tower)`);
    let bytes: Buffer;
    try {
      bytes = readFileSync(file);
    } catch (err) {
      throw new Error(`${file}: ${(err as NodeJS.ErrnoException).code === 'ENOENT' ? 'no such file' : (err as Error).message}`);
    }
    try {
      const image = await model.vision.prepareImageOffThread(await decodeImage(bytes));
      prepared.set(file, image);
      return image;
    } catch (err) {
      throw new Error(`${file}: ${(err as Error).message}`);
    }
  };

  return {
    model: name,
    contextLength: model.info.contextLength,
    acceptsImages: model.vision !== null,
    async *reply(turns: readonly ChatTurn[], o: ReplyOptions): AsyncGenerator<ReplyEvent> {
      const messages: ChatMessage[] = turns.map((t) =>
        t.images && t.images.length > 0 ? { ...imageUserMessage(t.content, t.images.length), role: t.role } : { role: t.role, content: t.content },
      );
      const files = turns.flatMap((t) => t.images ?? []);
      let promptIds: number[];
      let multimodal: MultimodalInput | undefined;
      if (files.length > 0) {
        const images: PreparedImage[] = [];
        for (const f of files) images.push(await prepare(f));
        ({ promptIds, multimodal } = imageChatPrompt(model, messages, images));
      } else {
        promptIds = model.encodePrompt({ messages });
      }
      const params = resolveSamplingParams(withSamplingDefaults({ temperature: o.temperature, maxTokens: o.maxTokens }, defaults), { maxTokens: o.maxTokens });
      const format: ResponseFormat | null = o.schema ? parseResponseFormat({ type: 'json_schema', json_schema: { name: 'schema', schema: o.schema, strict: true } }) : null;
      const matcher = format ? await grammar.matcher(format, { maxTokens: params.maxTokens, budgetClose: true }) : undefined;
      // Stopped while images or the schema were being prepared: the engine's listener would never fire.
      if (o.signal.aborted) {
        matcher?.dispose();
        yield { type: 'done', finishReason: 'abort', promptTokens: promptIds.length, completionTokens: 0, tokensPerSecond: 0 };
        return;
      }
      for await (const ev of engine.generate({ promptIds, params, multimodal, grammar: matcher }, o.signal)) {
        if (ev.type === 'delta') {
          if (ev.text !== '') yield { type: 'delta', text: ev.text };
        } else {
          yield {
            type: 'done',
            finishReason: o.signal.aborted ? 'abort' : ev.finishReason,
            promptTokens: ev.usage.promptTokens,
            completionTokens: ev.usage.completionTokens,
            tokensPerSecond: ev.timings.decodeTokensPerSecond,
          };
        }
      }
    },
    async close() {
      await engine.shutdown(0);
      await grammar.close?.();
      model.close();
    },
  };
}
