"""Where image bytes live: a local directory or an object store (``s3://``), behind one
small interface (:class:`~ckpt.storage.store.Store`), and the content-addressed image
repository built on it (:class:`~ckpt.storage.repository.Repository`).

Importing this package imports neither the S3 client nor msgspec: open a store with
:func:`ckpt.storage.store.open_store` or a repository with
``ckpt.storage.repository.Repository.open(url)``; the client is imported when an
``s3://`` URL is opened.
"""
