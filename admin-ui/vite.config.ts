import { defineConfig } from 'vitest/config'
import react from '@vitejs/plugin-react'

// The build lands in web/dist, which the Go package adminui embeds and the
// gateway serves at /admin/ (docs/admin-ui.md).
export default defineConfig({
  base: '/admin/',
  plugins: [react()],
  build: { outDir: 'web/dist', emptyOutDir: true, chunkSizeWarningLimit: 1500 },
  server: { proxy: { '/api': 'http://127.0.0.1:8080', '/v1': 'http://127.0.0.1:8080' } },
  test: { environment: 'jsdom', include: ['src/**/*.test.ts', 'src/**/*.test.tsx'] },
})
