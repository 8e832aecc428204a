// The line under the prompt: model, speed of the last reply, context in use, schema, images waiting.
import { createElement as h, type ReactElement } from 'react';
import { Text } from 'ink';

export interface Status {
  model: string;
  busy: boolean;
  tokensPerSecond: number | null;
  contextUsed: number | null;
  contextLength: number | null;
  schema: string | null;
  images: number;
  hint: string | null;
}

export function StatusLine({ s }: { s: Status }): ReactElement {
  const parts = [s.model];
  if (s.tokensPerSecond !== null) parts.push(`${s.tokensPerSecond.toFixed(1)} tok/s`);
  if (s.contextUsed !== null) {
    parts.push(s.contextLength ? `context ${s.contextUsed}/${s.contextLength} (${Math.round((s.contextUsed / s.contextLength) * 100)}%)` : `context ${s.contextUsed}`);
  }
  if (s.schema) parts.push(`schema ${s.schema}`);
  if (s.images > 0) parts.push(`${s.images} image${s.images > 1 ? 's' : ''} attached`);
  parts.push(s.hint ?? (s.busy ? 'Ctrl-C stops the reply' : '/help'));
  return h(Text, { dimColor: true }, parts.join(' · '));
}
