// The reply as it streams in (it joins the transcript when it ends).
import { createElement as h, type ReactElement } from 'react';
import { Text } from 'ink';

export function ReplyView({ text }: { text: string }): ReactElement {
  return h(Text, null, text === '' ? h(Text, { dimColor: true }, '…') : text);
}
