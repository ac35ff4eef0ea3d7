"""The app's logic and Plotly figures without Streamlit: everything a page shows is computed
here, so it can be tested without a browser."""
