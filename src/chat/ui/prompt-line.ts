// The input line: what you are typing, with a block cursor; dimmed while a reply streams.
import { createElement as h, type ReactElement } from 'react';
import { Box, Text } from 'ink';

export function PromptLine({ value, busy }: { value: string; busy: boolean }): ReactElement {
  return h(Box, null, h(Text, { color: busy ? 'gray' : 'cyan', bold: true }, '› '), h(Text, { dimColor: busy }, value), h(Text, { inverse: true }, ' '));
}
