// One finished line of the transcript: your message, a reply, a notice or an error.
import { createElement as h, type ReactElement } from 'react';
import { Box, Text } from 'ink';

export interface Entry {
  id: number;
  kind: 'user' | 'assistant' | 'notice' | 'error';
  text: string;
  /** e.g. "[stopped]" after a reply cut by Ctrl-C, or the attached images of a message. */
  note?: string;
}

export function TranscriptEntry({ entry }: { entry: Entry }): ReactElement {
  const note = entry.note ? h(Text, { dimColor: true }, ` ${entry.note}`) : null;
  switch (entry.kind) {
    case 'user':
      return h(Box, { marginTop: 1 }, h(Text, { color: 'cyan', bold: true }, '› '), h(Text, null, entry.text, note));
    case 'assistant':
      return h(Box, null, h(Text, null, entry.text, note));
    case 'notice':
      return h(Text, { dimColor: true }, entry.text);
    case 'error':
      return h(Text, { color: 'red' }, `error: ${entry.text}`);
  }
}
