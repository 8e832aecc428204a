// Mounts the chat app on the terminal and resolves when the user quits.
import { createElement as h } from 'react';
import { render } from 'ink';
import { ChatApp, type ChatAppProps } from './chat-app.js';

export async function renderChat(props: ChatAppProps): Promise<void> {
  const app = render(h(ChatApp, props), { exitOnCtrlC: false, patchConsole: false });
  await app.waitUntilExit();
}
