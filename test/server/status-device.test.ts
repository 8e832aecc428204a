// Where the served model runs reaches /v1/status: the served model takes device, name and note
// from the model info (a CUDA device, or the CPU with the reason it is not on the GPU).
import { describe, expect, it } from 'vitest';
import { servedModelFrom, type TextModelLike } from '../../src/server/served-model.js';
import { byteModel, MODEL_ID, raw, startFakeServer } from './helpers.js';

function textModel(info: Partial<TextModelLike['info']>): TextModelLike {
  return {
    info: { contextLength: 64, vocabSize: 8, ...info },
    defaults: {},
    text: { tokenizer: { decode: () => '' } },
    encodePrompt: () => [],
    template: null,
  };
}

describe('model device in the server', () => {
  it('the served model carries the device of the model info', () => {
    expect(servedModelFrom(textModel({ device: 'cuda', deviceName: 'NVIDIA H200' }), 'm').device).toEqual({ kind: 'cuda', name: 'NVIDIA H200' });
    const cpu = servedModelFrom(textModel({ device: 'cpu', deviceName: 'cpu', deviceNote: 'the CUDA backend does not run gemma4 yet' }), 'm');
    expect(cpu.device).toEqual({ kind: 'cpu', name: 'cpu', note: 'the CUDA backend does not run gemma4 yet' });
    expect(servedModelFrom(textModel({}), 'm').device).toBeUndefined();
  });

  it('/v1/status reports it', async () => {
    const device = { kind: 'cuda' as const, name: 'NVIDIA H200' };
    const s = await startFakeServer({}, {}, { model: { ...byteModel(256), device } });
    try {
      const st = (await raw(s.url, '/v1/status')).json();
      expect(st).toMatchObject({ model: MODEL_ID, device });
    } finally {
      await s.server.close(100);
    }
  });
});
