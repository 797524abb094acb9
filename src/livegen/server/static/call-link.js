// What both panels' WebRTC calls share: the offer, the data channel, and looking
// enough like a WebSocket (send, onmessage, onclose, readyState, close) for the
// panels to drive either. The media differ (webrtc.js: a microphone and an
// answer track; world-call.js: a receive-only video track); each subclass adds
// its own in `dial`'s `addMedia` and plays what comes in `play`.

// How long the offer, ICE and the data channel may take before the page falls back to the WebSocket.
const CONNECT_TIMEOUT_MS = 8000;

/** A call request the server answered with an error: its HTTP status and OpenAI-style code. */
export class CallRefused extends Error {
  constructor(message, status, code) {
    super(message);
    this.name = "CallRefused";
    this.status = status;
    this.code = code;
  }
}

export class PeerLink {
  constructor() {
    this.readyState = WebSocket.CONNECTING;
    this.onmessage = null;
    this.onclose = null;
    this.pc = null;
    this.channel = null;
    this.callId = null;
  }

  /** Offer `addMedia`'s media and the `channelName` channel; `post(sdp)` sends the offer and
   * answers the fetch Response. Resolves when the channel is open; throws `CallRefused` if the
   * server refuses the offer. */
  async dial(channelName, addMedia, post) {
    if (typeof RTCPeerConnection === "undefined") throw new Error("this browser has no WebRTC");
    const pc = new RTCPeerConnection();
    this.pc = pc;
    addMedia(pc);
    this.channel = pc.createDataChannel(channelName);
    this.channel.onmessage = (event) => this.onmessage?.({ data: event.data });
    let timer = null;
    const opened = new Promise((resolve, reject) => {
      this.channel.onopen = resolve;
      timer = setTimeout(() => reject(new Error("the call did not connect (ICE)")), CONNECT_TIMEOUT_MS);
    });
    pc.ontrack = (event) => this.play(event.streams[0] || new MediaStream([event.track]));
    pc.onconnectionstatechange = () => {
      if (["failed", "closed"].includes(pc.connectionState)) this.ended(`the call ${pc.connectionState}`);
    };
    try {
      await pc.setLocalDescription(await pc.createOffer());
      const response = await post(pc.localDescription.sdp);
      if (!response.ok) {
        const error = (await response.json().catch(() => ({}))).error || {};
        const words = error.message || `${new URL(response.url).pathname} answered HTTP ${response.status}`;
        throw new CallRefused(words, response.status, error.code);
      }
      this.callId = (response.headers.get("Location") || "").split("/").pop();
      await pc.setRemoteDescription({ type: "answer", sdp: await response.text() });
      await opened;
    } finally {
      clearTimeout(timer);
    }
    this.channel.onclose = () => this.ended("the server ended the call");
    this.readyState = WebSocket.OPEN;
  }

  /** The call's incoming track (each subclass plays its own media). */
  play(_stream) {}

  send(text) {
    if (this.readyState === WebSocket.OPEN) this.channel.send(text);
  }

  ended(words) {
    if (this.readyState === WebSocket.CLOSED) return;
    const wasOpen = this.readyState === WebSocket.OPEN;
    this.close();
    if (wasOpen) this.onclose?.({ code: 1000, reason: words });
  }

  close() {
    this.readyState = WebSocket.CLOSED;
    this.channel?.close();
    this.pc?.close();
  }
}
