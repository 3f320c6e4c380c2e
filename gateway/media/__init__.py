"""What users share, made ready for the model: downloaded, converted, stored.

    MediaPipeline.prepare(session_key, entries, new, vision)
        -> for each attachment of `new` not processed yet (bounded, concurrent):
           FileSource.locate -> download.fetch -> images | documents | audio
        -> store (under the session's hash tag, with an expiry)
        -> PreparedMedia: the items the compiler reads, the notices the user reads

Each module is one step: `download.py` (HTTP, streamed, limits while reading),
`images.py` (Pillow), `documents.py` (text and PDFs), `audio.py` (transcription),
`items.py` (what a processed attachment is), `store.py` (Redis) and `pipeline.py`.
How the compiler shows them to the model is the context's
(`gateway/context/media_parts.py`).
"""
