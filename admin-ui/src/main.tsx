import { createRoot } from 'react-dom/client'
import 'uplot/dist/uPlot.min.css'
import './styles.css'
import { App } from './App'
import { ConsoleApp } from './console/ConsoleApp'
import { CONSOLE_BASE } from './console/router'

// One app, two audiences: /console/ is the users' console, the rest the admin UI.
const Root = window.location.pathname.startsWith(CONSOLE_BASE) ? ConsoleApp : App
createRoot(document.getElementById('root')!).render(<Root />)
