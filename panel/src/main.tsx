import { render } from 'preact';
import { App } from './app/App.tsx';

render(<App />, document.getElementById('app')!);
