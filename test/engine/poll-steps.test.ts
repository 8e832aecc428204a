import { describe, expect, it } from 'vitest';
import { Engine } from '../../src/engine/engine.js';
import { FakeModel } from '../helpers/fake-runner.js';
import type { NativeModelInfo } from '../../src/native/types.js';
import { byteTextStream, bytes, collect, params } from './helpers.js';

const immediates = (): number => process.getActiveResourcesInfo().filter((r) => r === 'Immediate').length;

/** A fake that reports `device`, whose steps take stepMs, and that records whether the loop polled during each. */
class DeviceFake extends FakeModel {
  polledDuringStep: boolean[] = [];
  constructor(private readonly device: 'cpu' | 'cuda') {
    super({ stepMs: 5 });
  }
  override info(): NativeModelInfo {
    return { ...super.info(), device: this.device };
  }
  override step(...args: Parameters<FakeModel['step']>): ReturnType<FakeModel['step']> {
    const work = super.step(...args);
    // Right after the engine has the step's promise (a microtask runs once its synchronous code is done): no timer
    // that a loaded machine could delay past the step.
    queueMicrotask(() => this.polledDuringStep.push(immediates() > 0));
    return work;
  }
}

async function run(model: DeviceFake, pollSteps?: boolean): Promise<void> {
  const engine = new Engine({ model, newTextStream: byteTextStream, stopTokenIds: [model.opts.eosId], ...(pollSteps === undefined ? {} : { pollSteps }) });
  const out = await collect(engine.submit({ promptIds: bytes('poll'), params: params({ maxTokens: 3 }) }));
  expect(out.error).toBeUndefined();
  expect(out.tokens.length).toBe(3);
  await engine.shutdown(1000);
  await new Promise((r) => setImmediate(r));
  expect(immediates()).toBe(0); // the polling stopped with the last step
}

describe('Engine: the event loop polls while a GPU step runs', () => {
  it('polls during every step of a CUDA model, not of a CPU model', async () => {
    const gpu = new DeviceFake('cuda');
    await run(gpu);
    expect(gpu.polledDuringStep.length).toBeGreaterThan(0);
    expect(gpu.polledDuringStep.every(Boolean)).toBe(true);
    const cpu = new DeviceFake('cpu');
    await run(cpu);
    expect(cpu.polledDuringStep.length).toBeGreaterThan(0);
    expect(cpu.polledDuringStep.some(Boolean)).toBe(false);
  });

  it('pollSteps overrides the default', async () => {
    const gpu = new DeviceFake('cuda');
    await run(gpu, false);
    expect(gpu.polledDuringStep.some(Boolean)).toBe(false);
  });
});
