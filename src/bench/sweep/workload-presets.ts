// The named workloads of `rapid bench --workload` that are free text with preset settings: "sampled" (the
// issue's sampled decoding, temperature 0.8 / top-p 0.95) and "long-prompt" (prompts of 1024 words; pass
// --prompt-len 8192 for the longer one). A flag given on the command line wins over its preset.

/** The sampling of the sampled workload; bench:sampling and bench:cuda's sampled rows use it too. */
export const SAMPLED_SAMPLING = { temperature: 0.8, topP: 0.95 } as const;

/** Prompt words of the long-prompt workload (filler words are about one token each). */
export const LONG_PROMPT_WORDS = 1024;

/** Prompt words when neither --prompt-len nor a preset says. */
export const DEFAULT_PROMPT_WORDS = 128;

export type PresetWorkload = 'sampled' | 'long-prompt';

export interface WorkloadPreset {
  temperature?: number;
  topP?: number;
  promptLen?: string;
}

export function isPresetWorkload(choice: string | undefined): choice is PresetWorkload {
  return choice === 'sampled' || choice === 'long-prompt';
}

export function workloadPreset(choice: string | undefined): WorkloadPreset {
  switch (choice) {
    case 'sampled':
      return { ...SAMPLED_SAMPLING };
    case 'long-prompt':
      return { promptLen: String(LONG_PROMPT_WORDS) };
    default:
      return {};
  }
}
